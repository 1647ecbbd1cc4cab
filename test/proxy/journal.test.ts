import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type TestContext, test } from "node:test";
import pino from "pino";
import type { Op } from "../../src/caddy/routes/plan.js";
import { DenyList } from "../../src/events/egress.js";
import { Outbox } from "../../src/events/outbox.js";
import { outboxMigrations } from "../../src/events/store.js";
import { ChangeJournal, RecordedChange } from "../../src/proxy/journal.js";
import { proxyMigrations, RouteChangeStore } from "../../src/proxy/store.js";
import { openDatabase } from "../../src/store/db.js";
import { TEST_SECRET } from "../helpers/app.js";

// The journal on a real SQLite database. A batch's records are savepoints of one transaction; a commit that
// fails is caused for real, by a deferred foreign key that one change's record breaks and that SQLite
// checks only when the outermost transaction commits.

function journalOn(t: TestContext) {
  const dir = mkdtempSync(join(tmpdir(), "hk-journal-"));
  const db = openDatabase(dir, [...outboxMigrations, ...proxyMigrations]);
  db.exec(`
    CREATE TABLE allowed (id INTEGER PRIMARY KEY);
    CREATE TABLE poison (ref INTEGER REFERENCES allowed(id) DEFERRABLE INITIALLY DEFERRED);
    CREATE TRIGGER poisoned AFTER INSERT ON route_changes WHEN NEW.route_id = 'poison.test'
      BEGIN INSERT INTO poison VALUES (42); END;
  `);
  const outbox = new Outbox(db, {
    secret: TEST_SECRET,
    deny: new DenyList([]),
    timeoutMs: 1_000,
    retryScheduleSeconds: [60],
    log: pino({ level: "silent" }),
  });
  t.after(async () => {
    await outbox.close();
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const journal = new ChangeJournal({
    store: new RouteChangeStore(db),
    outbox,
    firstAttemptTimeoutMs: 1_000,
  });
  const rows = () =>
    db.prepare("SELECT route_id, outcome FROM route_changes ORDER BY id").all() as {
      route_id: string;
      outcome: string;
    }[];
  return { journal, rows };
}

const deleting = (id: string) => {
  const op: Op = { kind: "delete", id };
  return new RecordedChange(op, { operation: "delete", route_id: id, request_id: null }, undefined);
};

test("a batch whose commit fails is recorded again one change at a time: only the change that cannot be recorded fails", (t) => {
  const { journal, rows } = journalOn(t);
  const changes = ["a.test", "poison.test", "b.test"].map(deleting);
  const failed: string[] = [];
  journal.together(() => {
    for (const change of changes) journal.capture(change, null, () => failed.push(change.about.route_id));
    // Nothing is known of a record before its batch commits.
    assert.deepEqual(
      changes.map((c) => c.id),
      [undefined, undefined, undefined],
    );
  });
  assert.deepEqual(failed, ["poison.test"]);
  assert.equal(changes[1]?.id, undefined);
  assert.ok(changes[0]?.id !== undefined && changes[2]?.id !== undefined);
  assert.deepEqual(rows(), [
    { route_id: "a.test", outcome: "pending" },
    { route_id: "b.test", outcome: "pending" },
  ]);
});

test("a batch's changes are settled together and answered once their records are committed", (t) => {
  const { journal, rows } = journalOn(t);
  const changes = ["a.test", "b.test"].map(deleting);
  journal.together(() => {
    for (const change of changes) journal.capture(change, null, (err) => assert.fail(String(err)));
  });
  const answered: string[] = [];
  journal.together(() => {
    for (const change of changes)
      journal.settle(change, { outcome: { kind: "applied", route: null }, previous: null }, (err) => {
        assert.equal(err, undefined);
        answered.push(change.about.route_id);
      });
    assert.deepEqual(answered, [], "no change is answered before its batch commits");
  });
  assert.deepEqual(answered, ["a.test", "b.test"]);
  assert.deepEqual(rows(), [
    { route_id: "a.test", outcome: "applied" },
    { route_id: "b.test", outcome: "applied" },
  ]);
});
