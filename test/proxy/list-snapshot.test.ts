import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { PassThrough, type Readable } from "node:stream";
import { test } from "node:test";
import { CaddyAdmin } from "../../src/caddy/admin.js";
import { lastLoad } from "../../src/caddy/last-load.js";
import { RoutesSnapshot } from "../../src/caddy/routes/routes-snapshot.js";
import { readAll } from "../../src/caddy/routes/routes-stream.js";
import { buildTestApp, PLAIN_ROUTES } from "../helpers/app.js";
import { caddyMetric, startRefusableCaddy } from "../helpers/caddy.js";
import { closeAfter } from "../helpers/http.js";

// A list asked for while Caddy has loaded no config since the last one is answered with that list's bytes,
// without Caddy encoding its routes again; anything Caddy loads in between is seen.

const ROUTES = "/config/apps/http/servers/srv0/routes";

const staticRoute = (id: string, body = id) => ({
  "@id": id,
  match: [{ host: [id] }],
  handle: [{ handler: "static_response", body }],
});

/** Reads a list body whole, whether kept as text or streamed. */
const readBody = async (x: Readable | string): Promise<string> => (typeof x === "string" ? x : readAll(x));

/** The snapshot is the cached routes store's (cached-routes.ts), which TEST_ROUTES_BACKEND=plain replaces. */
const skip = PLAIN_ROUTES && "the plain routes store reads Caddy for every list";

test("a list asked again while Caddy loaded nothing is its bytes without a read of Caddy's config; changes behind the agent's back, a refused change and a restart are seen", {
  skip,
}, async (t) => {
  const { caddy, refuse, accept } = await startRefusableCaddy(t);
  const { call } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  // Large enough to be streamed (and kept compressed), with characters Caddy escapes its own way.
  const many = Array.from({ length: 1000 }, (_, i) => staticRoute(`s${i}.snap.test`, `<${i}> & ü`));
  await caddy.admin.write("PATCH", ROUTES, many);
  const list = async () => {
    const res = await call({ method: "GET", url: "/v1/proxy/routes" });
    assert.equal(res.statusCode, 200, res.body);
    return res.body;
  };
  const configReads = () =>
    caddyMetric(caddy.admin, "caddy_admin_http_requests_total", { method: "GET", path: "/config/" });

  const first = await list();
  assert.ok(first.length > 64 * 1024);
  assert.equal(first, (await caddy.admin.read(ROUTES)).text);
  const before = await configReads();
  assert.equal(await list(), first);
  assert.equal(await list(), first);
  assert.equal(await configReads(), before, "the repeated lists read none of Caddy's config");

  // A change made directly in Caddy is in the next lists, asked for together: they read Caddy once.
  await caddy.admin.write("POST", ROUTES, staticRoute("outside.snap.test"));
  const readsBefore = await configReads();
  const together = await Promise.all(Array.from({ length: 8 }, () => list()));
  assert.equal((await configReads()) - readsBefore, 1, "one read of the routes for the eight lists");
  const changed = together[0] as string;
  assert.ok(changed.includes("outside.snap.test"));
  for (const other of together) assert.equal(other, changed);
  assert.equal(changed, (await caddy.admin.read(ROUTES)).text);

  // A change Caddy refuses leaves the routes, and the list, as they were.
  refuse();
  await assert.rejects(caddy.admin.write("POST", ROUTES, staticRoute("refused.snap.test")));
  accept();
  assert.equal(await list(), changed);

  // Caddy restarted on its first config: the list is what it holds now.
  await caddy.stop();
  await caddy.start();
  const restarted = await list();
  const held = (await caddy.admin.read(ROUTES)).text;
  assert.equal(restarted, held.trim() === "null" ? "[]" : held);
  assert.ok(!restarted.includes("s0.snap.test"), "the routes from before the restart are gone");
});

test("Caddy's last load changes with every config it loads and not with one it refuses", async (t) => {
  const { caddy, refuse, accept } = await startRefusableCaddy(t);
  // lastLoad reads once, without retrying: right after a change, Caddy's admin endpoint restarting may
  // reset it (the list then reads Caddy's routes). Here the value itself is looked at.
  const loaded = async (): Promise<string> => {
    for (let i = 0; i < 40; i++) {
      const value = await lastLoad(caddy.admin);
      if (value !== undefined) return value;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error("Caddy never said when it last loaded");
  };
  const first = await loaded();
  assert.match(first, /^\d/);
  assert.equal(await loaded(), first);
  await caddy.admin.write("POST", ROUTES, staticRoute("one.snap.test"));
  const second = await loaded();
  assert.notEqual(second, first);
  refuse();
  await assert.rejects(caddy.admin.write("POST", ROUTES, staticRoute("two.snap.test")));
  accept();
  assert.equal(await loaded(), second);
});

test("an admin endpoint whose metrics do not say when it loaded gives no last load", async (t) => {
  let answer: { status: number; body: string } = { status: 404, body: "not found" };
  const server = http.createServer((req, res) => {
    req.resume();
    res.writeHead(answer.status, { "content-type": "text/plain" }).end(answer.body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closeAfter(t, server);
  const url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  const admin = new CaddyAdmin({ kind: "tcp", url }, 2000);
  assert.equal(await lastLoad(admin), undefined);
  answer = {
    status: 200,
    body: `go_goroutines 12\n${"x".repeat(10_000)}\ncaddy_config_last_reload_successful 1\n`,
  };
  assert.equal(await lastLoad(admin), undefined);
  answer = { status: 200, body: "a 1\ncaddy_config_last_reload_success_timestamp_seconds 1.7e+09\nb 2\n" };
  assert.equal(await lastLoad(admin), "1.7e+09");
});

test("a list body is kept for its load only once it has been read whole", async () => {
  const snapshot = new RoutesSnapshot();
  const text = JSON.stringify(Array.from({ length: 5000 }, (_, i) => staticRoute(`k${i}.snap.test`)));

  // Failing half-way: the failure reaches the reader, and nothing is kept.
  const failing = new PassThrough();
  const passed = snapshot.keep("1", failing) as Readable;
  failing.write(text.slice(0, 1000));
  failing.destroy(new Error("Caddy broke off"));
  await assert.rejects(readBody(passed), /broke off/);
  assert.equal(snapshot.at("1"), undefined);

  // Abandoned by its reader half-way: still read to its end, at Caddy's pace, and kept for the lists
  // waiting for it.
  const abandoned = new PassThrough();
  let over = false;
  const out = snapshot.keep("2", abandoned, () => {
    over = true;
  }) as Readable;
  abandoned.write(text.slice(0, 1000));
  out.destroy();
  abandoned.end(text.slice(1000));
  for (let i = 0; !over && i < 500; i++) await new Promise((r) => setTimeout(r, 10));
  const kept = snapshot.at("2");
  assert.ok(kept !== undefined);
  assert.equal(await readBody(kept), text);

  // Passed whole: the same bytes again for the same load, none for another.
  const whole = new PassThrough();
  const read = readBody(snapshot.keep("3", whole) as Readable);
  whole.end(text);
  assert.equal(await read, text);
  // Kept once its compression has finished, off the main thread.
  let again = snapshot.at("3");
  for (let i = 0; again === undefined && i < 500; i++) {
    await new Promise((r) => setTimeout(r, 10));
    again = snapshot.at("3");
  }
  assert.ok(again !== undefined);
  assert.equal(await readBody(again), text);
  // Sent again in pieces of 64 KiB at most, what a list holds while its reader takes them (200 lists at
  // once held 52 MB with 256 KiB pieces).
  const pieces: number[] = [];
  for await (const piece of snapshot.at("3") as Readable) pieces.push((piece as Buffer).length);
  assert.ok(
    pieces.length > 1 && Math.max(...pieces) <= 64 * 1024,
    `pieces of up to ${Math.max(...pieces)} bytes`,
  );
  assert.equal(snapshot.at("4"), undefined);

  // Small lists, answered as text, are kept as they are.
  assert.equal(snapshot.keep("5", "[]"), "[]");
  assert.equal(snapshot.at("5"), "[]");
  assert.equal(snapshot.at("3"), undefined);
});
