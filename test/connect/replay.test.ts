/**
 * The kept answers of changes over the connection (connect/replay.ts) across a restart of the agent: a new
 * cache on the same database is what the agent restarted has. A change cut off by a crash is never run again.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { REPLAY_MS, ReplayCache } from "../../src/connect/replay.js";
import { connectMigrations, ReplayStore } from "../../src/connect/replay-store.js";
import { openDatabase } from "../../src/store/db.js";

function database(t: { after: (fn: () => void) => void }) {
  const dir = mkdtempSync(join(tmpdir(), "hk-replay-"));
  const db = openDatabase(dir, connectMigrations);
  t.after(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return db;
}

test("an answer kept before a restart answers after it; one begun and cut off is refused, not run again", async (t) => {
  const db = database(t);
  let now = 1_000_000;
  const before = new ReplayCache(new ReplayStore(db), () => now);
  const answer = {
    status: 201,
    headers: { "content-type": "application/json" },
    body: Buffer.from('{"ok":1}'),
  };
  before.remember("SHA256:cp", "done-1", "POST", "/v1/proxy/routes", Promise.resolve(answer));
  await new Promise((r) => setImmediate(r));
  // Begun, and never finished: the agent stops in the middle.
  before.remember("SHA256:cp", "cut-1", "POST", "/v1/system/apply-updates", new Promise(() => {}));
  // Begun, and forgotten (its body never came): free to be sent again.
  before.remember("SHA256:cp", "nobody-1", "POST", "/v1/proxy/routes", new Promise(() => {}));
  before.forget("SHA256:cp", "nobody-1");

  const after = new ReplayCache(new ReplayStore(db), () => now);
  const done = after.find("SHA256:cp", "done-1");
  assert.deepEqual(done && { method: done.method, path: done.path, answer: await done.answer }, {
    method: "POST",
    path: "/v1/proxy/routes",
    answer,
  });
  const cut = after.find("SHA256:cp", "cut-1");
  assert.ok(cut);
  await assert.rejects(cut.answer, /ended without an answer \(the agent stopped during it\)/);
  assert.equal(after.find("SHA256:cp", "nobody-1"), undefined);
  assert.equal(after.find("SHA256:other", "done-1"), undefined, "ids are each control plane's own");
  now += REPLAY_MS + 1;
  assert.equal(after.find("SHA256:cp", "done-1"), undefined, "forgotten after 10 minutes");
});
