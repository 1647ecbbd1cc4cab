import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";
import { projectRoot } from "../src/paths.js";

/**
 * The idle collection in a Node of its own, started with `--expose-gc` as the agent is, counting the calls
 * of V8's collector: asked for while requests keep arriving, it waits for them to stop, then runs once.
 */
test("a collection asked for runs once the requests stop, not while they arrive, and only when asked", () => {
  const module = pathToFileURL(join(projectRoot(), "dist/src/util/idle-gc.js")).href;
  const script = `
    const collect = globalThis.gc;
    let runs = 0;
    globalThis.gc = (options) => { runs++; collect(options); };
    const { collectWhenIdle, postponeIdleCollection } = await import(${JSON.stringify(module)});
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    collectWhenIdle();
    // A request every 0.7 s for 5.6 s: longer than the 5 s of quiet the collection waits for.
    for (let i = 0; i < 8; i++) { await sleep(700); postponeIdleCollection(); }
    const whileRequests = runs;
    await sleep(5500);
    const afterThem = runs;
    // Requests alone ask for nothing.
    postponeIdleCollection();
    await sleep(5500);
    console.log(JSON.stringify({ whileRequests, afterThem, unasked: runs - afterThem }));
  `;
  const r = spawnSync(process.execPath, ["--expose-gc", "--input-type=module", "-e", script], {
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), { whileRequests: 0, afterThem: 1, unasked: 0 });
});
