import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { outboxMigrations } from "../../src/events/store.js";
import { proxyMigrations } from "../../src/proxy/store.js";
import { openDatabase } from "../../src/store/db.js";

// A database written by an agent before the history and restore migrations, opened by this one.

test("route changes and events recorded before the upgrade keep their ids and gain the new columns", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-migrate-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const [outbox1] = outboxMigrations;
  const [proxy1] = proxyMigrations;
  assert.ok(outbox1 && proxy1);

  const older = openDatabase(dir, [outbox1, proxy1]);
  const insert = older.prepare(
    `INSERT INTO route_changes (operation, route_id, previous, requested, requested_at, finished_at, outcome, event_id)
     VALUES (?, 'm.test', ?, ?, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01.000Z', 'applied', ?)`,
  );
  insert.run("create", null, '{"@id":"m.test"}', "msg_a");
  insert.run("delete", '{"@id":"m.test"}', null, null);
  // The newest row was removed by hand: its id must still never be given again.
  insert.run("create", null, '{"@id":"m.test"}', null);
  older.prepare("DELETE FROM route_changes WHERE id = 3").run();
  older
    .prepare(
      `INSERT INTO outbox_events (id, type, url, payload, state, attempts, next_attempt_at, created_at)
       VALUES ('msg_a', 'route_backup', 'http://127.0.0.1:9/', '{}', 'dead', 10, 0, '2026-01-01T00:00:00.000Z')`,
    )
    .run();
  older.close();

  const db = openDatabase(dir, [...outboxMigrations, ...proxyMigrations]);
  t.after(() => db.close());
  assert.deepEqual(
    db.prepare("SELECT id, operation, event_id, request_id, restored_from FROM route_changes").all(),
    [
      { id: 1, operation: "create", event_id: "msg_a", request_id: null, restored_from: null },
      { id: 2, operation: "delete", event_id: null, request_id: null, restored_from: null },
    ],
  );
  const next = db
    .prepare(
      `INSERT INTO route_changes (operation, route_id, requested_at, outcome, restored_from)
       VALUES ('restore', 'm.test', '2026-01-02T00:00:00.000Z', 'pending', 2)`,
    )
    .run();
  assert.equal(next.lastInsertRowid, 4, "ids go on after the highest ever given");
  assert.deepEqual(
    db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'route_changes'").all(),
    [{ name: "route_changes_route" }],
  );
  assert.deepEqual(db.prepare("SELECT schedule_offset, redelivered_at FROM outbox_events").all(), [
    { schedule_offset: 0, redelivered_at: null },
  ]);
});
