import assert from "node:assert/strict";
import { test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { RouteJson } from "../../src/caddy/routes/plan.js";
import { RoutesCache } from "../../src/caddy/routes/routes-cache.js";

// The collector, to see what the cache still keeps alive (Node hands it out only with --expose-gc).
setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const routes = (prefix: string): RouteJson[] =>
  Array.from({ length: 50 }, (_, i) => ({
    "@id": `${prefix}${i}.cache.test`,
    match: [{ host: [`${prefix}${i}`] }],
  }));

test("routes the cache held parsed are let go once replaced, not kept until their put-away time", async () => {
  const cache = new RoutesCache(
    60_000,
    () => {},
    (routes) => `"etag ${routes.length}"`,
  );
  // Each write's routes are parsed (their ETag computed) for the next change, then replaced by the next
  // write. (In a function of its own: a suspended async function's frame may still hold a loop's last value.)
  const write = (prefix: string): WeakRef<RouteJson[]> => {
    const written = routes(prefix);
    cache.holdWritten(written);
    assert.equal(cache.state()?.routes, written);
    return new WeakRef(written);
  };
  const replaced = ["a", "b", "c"].map(write);
  const last = routes("d");
  cache.holdWritten(last);
  assert.equal(cache.state()?.routes, last);
  // A WeakRef keeps its target until the current task is over.
  await new Promise((resolve) => setImmediate(resolve));
  gc();
  assert.deepEqual(
    replaced.map((r) => r.deref() === undefined),
    [true, true, true],
    "the replaced routes were collected",
  );
  assert.equal(cache.state()?.routes, last);
});

test("parsed routes left unused are put away as their text, and parsed again from it", async () => {
  const parsed: number[] = [];
  const cache = new RoutesCache(
    20,
    (s) => parsed.push(s.routes.length),
    (routes) => `"etag ${routes.length}"`,
  );
  const written = routes("a");
  cache.holdWritten(written);
  const state = cache.state();
  assert.equal(state?.routes, written);
  await new Promise((resolve) => setTimeout(resolve, 60));
  const again = cache.state();
  assert.notEqual(again?.routes, written, "parsed again from the text it was put away as");
  assert.deepEqual(again?.routes, written);
  assert.equal(again?.etag, state?.etag);
  assert.deepEqual(parsed, [50, 50]);
});
