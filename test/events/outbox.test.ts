import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, type TestContext, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import pino from "pino";
import { DenyList } from "../../src/events/egress.js";
import { type NewEvent, Outbox, type OutboxOptions } from "../../src/events/outbox.js";
import { type OutboxEvent, outboxMigrations } from "../../src/events/store.js";
import { projectRoot } from "../../src/paths.js";
import { type Db, openDatabase } from "../../src/store/db.js";
import { freePort } from "../../support/loopback.js";
import { TEST_SECRET } from "../helpers/app.js";
import { closeAfter, startReceiver, verifyStandardWebhook } from "../helpers/http.js";

// The durable webhook outbox on a real SQLite database, delivering to real loopback receivers. Retry
// schedules are short (or long, where a test must see an event stay pending) through the constructor, and
// every wait is on an event (a request arriving, a row changing), bounded.

const WAIT_MS = 10_000;

// Removed once every test of the file is over, so never under a database still open.
const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function dataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-outbox-"));
  dirs.push(dir);
  return dir;
}

// The receivers are on loopback, which callbacks may reach; the deny list has tests of its own.
const options = (retryScheduleSeconds: number[]): OutboxOptions => ({
  secret: TEST_SECRET,
  deny: new DenyList(["169.254.0.0/16"]),
  timeoutMs: 5_000,
  retryScheduleSeconds,
  log: pino({ level: "silent" }),
});

/** An outbox on the database in `dir` (a new one unless given), closed with it when the test ends. */
function openOutbox(t: TestContext, opts: { retryScheduleSeconds: number[]; dir?: string }) {
  const db = openDatabase(opts.dir ?? dataDir(), outboxMigrations);
  const outbox = new Outbox(db, options(opts.retryScheduleSeconds));
  t.after(async () => {
    await outbox.close();
    db.close();
  });
  return { db, outbox };
}

/** Writes an event into the database in `dir` as an agent that then stops would: no worker runs. */
function writeEvent(dir: string, event: NewEvent): string {
  const db = openDatabase(dir, outboxMigrations);
  try {
    return new Outbox(db, options([60])).add(event);
  } finally {
    db.close();
  }
}

/** Waits (bounded) until the event's row satisfies `done`; returns the row. */
async function waitForRow(
  outbox: Outbox,
  id: string,
  done: (ev: OutboxEvent) => boolean,
  what: string,
): Promise<OutboxEvent> {
  const end = Date.now() + WAIT_MS;
  for (;;) {
    const ev = outbox.get(id);
    if (ev && done(ev)) return ev;
    if (Date.now() > end) throw new Error(`${id} not ${what} within ${WAIT_MS} ms: ${JSON.stringify(ev)}`);
    await sleep(10);
  }
}

/** When the event's first attempt started, from its attempt record (ms since the epoch). */
const firstAttemptAt = (db: Db, id: string) =>
  Date.parse(
    (
      db.prepare("SELECT started_at FROM outbox_attempts WHERE event_id = ? AND attempt = 1").get(id) as {
        started_at: string;
      }
    ).started_at,
  );

const ids = (requests: { headers: Record<string, unknown> }[]) =>
  requests.map((r) => String(r.headers["webhook-id"]));

describe("outbox: retries, dead letters, 410, Retry-After", () => {
  test("an event whose every attempt fails is dead-lettered after the last delay of the schedule", async (t) => {
    const rx = await startReceiver(t, { status: () => 503 });
    const { outbox } = openOutbox(t, { retryScheduleSeconds: [0.05, 0.05] });
    const id = outbox.add({ type: "system_update", url: rx.url, data: { n: 1 } });
    outbox.start();
    const ev = await waitForRow(outbox, id, (e) => e.attempts >= 3, "attempted 3 times");
    assert.equal(ev.state, "dead", "no delay left after the third attempt");
    assert.equal(ev.attempts, 3);
    assert.match(String(ev.last_error), /^HTTP 503/);
    assert.deepEqual(ids(rx.requests), [id, id, id]);
    // A dead event is not attempted again.
    assert.equal(await outbox.deliverNow(id, 1_000), false);
    assert.equal(rx.requests.length, 3);
  });

  test("410 Gone dead-letters the event at its first attempt, with the whole schedule left", async (t) => {
    const rx = await startReceiver(t, { status: () => 410 });
    const { outbox } = openOutbox(t, { retryScheduleSeconds: [60, 60] });
    const id = outbox.add({ type: "system_update", url: rx.url, data: {} });
    outbox.start();
    const ev = await waitForRow(outbox, id, (e) => e.attempts === 1, "attempted");
    assert.equal(ev.state, "dead");
    assert.deepEqual(
      outbox.attempts(id).map((a) => a.status_code),
      [410],
    );
  });

  test("a failed attempt with delays left keeps the event pending until the schedule's next delay", async (t) => {
    const rx = await startReceiver(t, { status: () => 503 });
    const { outbox, db } = openOutbox(t, { retryScheduleSeconds: [60] });
    const id = outbox.add({ type: "system_update", url: rx.url, data: {} });
    outbox.start();
    const ev = await waitForRow(outbox, id, (e) => e.attempts === 1, "attempted");
    assert.equal(ev.state, "pending");
    // 60 s with +-20% jitter, counted from the attempt.
    const delay = ev.next_attempt_at - firstAttemptAt(db, id);
    assert.ok(delay >= 48_000, `next attempt ${delay} ms after the first`);
    assert.ok(ev.next_attempt_at <= Date.now() + 72_000, `next attempt ${delay} ms after the first`);
  });

  for (const [form, retryAfter, atLeastMs] of [
    ["seconds", () => "3600", 3_600_000],
    ["an HTTP date", () => new Date(Date.now() + 3_600_000).toUTCString(), 3_500_000],
  ] as const)
    test(`Retry-After in ${form} puts the next attempt off beyond the schedule's delay`, async (t) => {
      const rx = await startReceiver(t, {
        status: () => 503,
        headers: () => ({ "retry-after": retryAfter() }),
      });
      const { outbox, db } = openOutbox(t, { retryScheduleSeconds: [0.05, 0.05] });
      const id = outbox.add({ type: "system_update", url: rx.url, data: {} });
      outbox.start();
      const ev = await waitForRow(outbox, id, (e) => e.attempts === 1, "attempted");
      assert.equal(ev.state, "pending");
      const delay = ev.next_attempt_at - firstAttemptAt(db, id);
      assert.ok(delay >= atLeastMs, `next attempt ${delay} ms after the first`);
    });

  test("every retry carries the event's webhook-id, its body and a signature that verifies", async (t) => {
    const rx = await startReceiver(t, { status: (n) => (n === 0 ? 503 : 200) });
    const { outbox } = openOutbox(t, { retryScheduleSeconds: [0.05] });
    const id = outbox.add({ type: "system_update", url: rx.url, data: { route_id: "a.test" } });
    outbox.start();
    await waitForRow(outbox, id, (e) => e.state === "delivered", "delivered");
    const [first, retry] = rx.requests;
    assert.ok(first && retry && rx.requests.length === 2, `${rx.requests.length} requests`);
    assert.deepEqual(ids(rx.requests), [id, id]);
    assert.equal(retry.body, first.body);
    assert.equal(retry.json.type, "system_update");
    assert.deepEqual(retry.json.data, { route_id: "a.test" });
    for (const r of rx.requests) assert.ok(verifyStandardWebhook(TEST_SECRET, r), "signature verifies");
  });
});

describe("outbox: redelivery", () => {
  test("a dead event redelivered gets the whole schedule again, its attempts numbered on", async (t) => {
    const rx = await startReceiver(t, { status: () => 503 });
    const { outbox } = openOutbox(t, { retryScheduleSeconds: [0.05] });
    const id = outbox.add({ type: "system_update", url: rx.url, data: {} });
    outbox.start();
    await waitForRow(outbox, id, (e) => e.state === "dead", "dead");
    const r = outbox.redeliver(id);
    assert.ok(r.ok);
    assert.deepEqual([r.event.state, r.event.schedule_offset], ["pending", 2]);
    // Two more attempts (the first, then the schedule's one retry), not one: the schedule restarted.
    const ev = await waitForRow(outbox, id, (e) => e.state === "dead", "dead again");
    assert.equal(ev.attempts, 4);
    assert.deepEqual(
      outbox.attempts(id).map((a) => [a.attempt, a.status_code]),
      [
        [1, 503],
        [2, 503],
        [3, 503],
        [4, 503],
      ],
    );
    assert.deepEqual(ids(rx.requests), [id, id, id, id]);
  });

  test("redeliver refuses a pending event and an unknown one, and changes neither", async (t) => {
    const { outbox } = openOutbox(t, { retryScheduleSeconds: [60] });
    const id = outbox.add({ type: "system_update", url: "http://127.0.0.1:9/hook", data: {} });
    const before = outbox.get(id);
    assert.deepEqual(outbox.redeliver(id), { ok: false, reason: "pending", event: before });
    assert.deepEqual(outbox.get(id), before);
    assert.deepEqual(outbox.redeliver("msg_unknown"), { ok: false, reason: "not_found" });
  });
});

describe("outbox: ordering per key", () => {
  test("events of one key are delivered one at a time, in the order written, even when the first needs a retry", async (t) => {
    const rx = await startReceiver(t, { status: (n) => (n === 0 ? 503 : 200) });
    const { outbox } = openOutbox(t, { retryScheduleSeconds: [0.05] });
    const key = "operator_update:u1";
    const written = ["queued", "downloading", "succeeded"].map((state) =>
      outbox.add({ type: "operator_update", url: rx.url, data: { state }, orderingKey: key }),
    );
    const [e1, e2, e3] = written as [string, string, string];
    outbox.start();
    await waitForRow(outbox, e3, (e) => e.state === "delivered", "delivered");
    assert.deepEqual(ids(rx.requests), [e1, e1, e2, e3], "e2 and e3 waited for e1's retry");
  });

  test("a key waiting for a retry does not hold up another key", async (t) => {
    const rx = await startReceiver(t, { status: (_n, w) => (w.json.data.key === "a" ? 503 : 200) });
    const { outbox } = openOutbox(t, { retryScheduleSeconds: [60] });
    const a1 = outbox.add({ type: "route_change", url: rx.url, data: { key: "a" }, orderingKey: "a" });
    const a2 = outbox.add({ type: "route_change", url: rx.url, data: { key: "a" }, orderingKey: "a" });
    const b1 = outbox.add({ type: "route_change", url: rx.url, data: { key: "b" }, orderingKey: "b" });
    outbox.start();
    await waitForRow(outbox, b1, (e) => e.state === "delivered", "delivered");
    await waitForRow(outbox, a1, (e) => e.attempts === 1, "attempted");
    // a1 waits a minute for its retry; a2 may not go before it, whoever asks.
    assert.equal(await outbox.deliverNow(a2, 1_000), false);
    assert.equal(outbox.get(a2)?.attempts, 0);
    assert.ok(!ids(rx.requests).includes(a2), "a2 was never sent");
  });

  test("while an attempt is in flight, the next event of its key does not start; it goes once the first is answered", async (t) => {
    let release = () => {};
    const answered = new Promise<void>((r) => {
      release = r;
    });
    t.after(() => release());
    const rx = await startReceiver(t, { hold: (w) => (w.json.data.n === 1 ? answered : undefined) });
    const { outbox } = openOutbox(t, { retryScheduleSeconds: [60] });
    const e1 = outbox.add({ type: "route_change", url: rx.url, data: { n: 1 }, orderingKey: "k" });
    const e2 = outbox.add({ type: "route_change", url: rx.url, data: { n: 2 }, orderingKey: "k" });
    outbox.start();
    await rx.waitForRequests(1, WAIT_MS);
    assert.equal(await outbox.deliverNow(e2, 1_000), false, "e1 is still in flight");
    assert.deepEqual(ids(rx.requests), [e1]);
    release();
    await waitForRow(outbox, e2, (e) => e.state === "delivered", "delivered");
    assert.deepEqual(ids(rx.requests), [e1, e2]);
    assert.equal(outbox.get(e1)?.state, "delivered");
  });
});

describe("outbox: at least once across restarts", () => {
  test("an event written while no worker runs is delivered by the next outbox on the same database", async (t) => {
    const dir = dataDir();
    const rx = await startReceiver(t);
    const id = writeEvent(dir, { type: "system_update", url: rx.url, data: {} });
    const { outbox } = openOutbox(t, { dir, retryScheduleSeconds: [60] });
    outbox.start();
    await waitForRow(outbox, id, (e) => e.state === "delivered", "delivered");
    assert.deepEqual(ids(rx.received), [id]);
  });

  test("an attempt cut short by a crash is made again after the restart, with the same webhook-id and body", async (t) => {
    const dir = dataDir();
    // The first delivery is left unanswered: the worker's process is killed while it waits for the answer.
    let release = () => {};
    const never = new Promise<void>((r) => {
      release = r;
    });
    t.after(() => release());
    const rx = await startReceiver(t, { hold: () => (rx.received.length === 1 ? never : undefined) });
    const id = writeEvent(dir, { type: "system_update", url: rx.url, data: { n: 1 } });

    const worker = spawn(
      process.execPath,
      [join(projectRoot(), "test/events/fixtures/outbox-worker.mjs"), dir],
      { env: { ...process.env, OUTBOX_SECRET: TEST_SECRET }, stdio: ["ignore", "ignore", "inherit"] },
    );
    const exited = once(worker, "exit");
    t.after(() => {
      if (worker.exitCode === null && worker.signalCode === null)
        process.kill(worker.pid as number, "SIGKILL");
    });
    await rx.waitForRequests(1, WAIT_MS).catch((err: Error) => {
      throw new Error(`${err.message} (worker exit code: ${worker.exitCode})`);
    });
    process.kill(worker.pid as number, "SIGKILL");
    await exited;

    const { outbox } = openOutbox(t, { dir, retryScheduleSeconds: [60] });
    const left = outbox.get(id);
    assert.deepEqual([left?.state, left?.attempts], ["pending", 0], "the cut attempt was never recorded");
    outbox.start();
    await waitForRow(outbox, id, (e) => e.state === "delivered", "delivered");
    const [cut, again] = rx.requests;
    assert.ok(cut && again && rx.requests.length === 2, `${rx.requests.length} requests`);
    assert.deepEqual(ids(rx.requests), [id, id]);
    assert.equal(again.body, cut.body);
    assert.deepEqual(
      outbox.attempts(id).map((a) => a.status_code),
      [200],
    );
  });
});

describe("outbox: every attempt recorded", () => {
  test("refused connection, time-out, HTTP error and success are each recorded with their outcome", async (t) => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/hook`;
    // The worker is not started: each attempt is made by deliverNow, and the long schedule keeps the
    // worker's timer (armed by a failed attempt) from making one of its own during the test.
    const { outbox, db } = openOutbox(t, { retryScheduleSeconds: [60, 60, 60, 60] });
    const id = outbox.add({ type: "system_update", url, data: {} });

    assert.equal(await outbox.deliverNow(id, 5_000), false, "nothing listens yet");
    let release = () => {};
    const late = new Promise<void>((r) => {
      release = r;
    });
    t.after(() => release());
    // The first request gets no answer until the test ends; then one 500, then 200.
    await startReceiver(t, {
      port,
      status: (n) => (n === 1 ? 500 : 200),
      hold: () => (outbox.attempts(id).length === 1 ? late : undefined),
    });
    assert.equal(await outbox.deliverNow(id, 300), false, "no answer in time");
    assert.equal(await outbox.deliverNow(id, 5_000), false, "HTTP 500");
    assert.equal(await outbox.deliverNow(id, 5_000), true);

    const attempts = outbox.attempts(id);
    assert.deepEqual(
      attempts.map((a) => [a.attempt, a.status_code]),
      [
        [1, null],
        [2, null],
        [3, 500],
        [4, 200],
      ],
    );
    assert.match(String(attempts[0]?.error), /ECONNREFUSED/);
    assert.match(String(attempts[1]?.error), /no response within 300 ms/);
    assert.match(String(attempts[2]?.error), /^HTTP 500/);
    assert.equal(attempts[3]?.error, null);
    const ev = outbox.get(id);
    assert.deepEqual([ev?.state, ev?.attempts, ev?.last_error], ["delivered", 4, null]);
    const times = db
      .prepare("SELECT started_at, duration_ms FROM outbox_attempts WHERE event_id = ? ORDER BY attempt")
      .all(id) as { started_at: string; duration_ms: number }[];
    for (const a of times) {
      assert.ok(!Number.isNaN(Date.parse(a.started_at)), a.started_at);
      assert.ok(Number.isInteger(a.duration_ms) && a.duration_ms >= 0, String(a.duration_ms));
    }
  });
});

describe("outbox: kept-alive connections", () => {
  test("two callbacks to one receiver share a connection; one the receiver dropped is sent again on a new one", async (t) => {
    let connections = 0;
    const requests: string[] = [];
    // The second request arrives on the first one's connection, and the receiver drops that connection
    // without an answer, as a server that closes an idle connection at that moment would.
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        requests.push(String(req.headers["webhook-id"]));
        if (requests.length === 2) req.socket.destroy();
        else res.writeHead(200).end();
      });
    });
    server.on("connection", () => connections++);
    closeAfter(t, server);
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    const { outbox } = openOutbox(t, { retryScheduleSeconds: [60] });

    const first = outbox.add({ type: "system_update", url, data: { n: 1 } });
    assert.equal(await outbox.deliverNow(first, 5_000), true);
    const second = outbox.add({ type: "system_update", url, data: { n: 2 } });
    assert.equal(await outbox.deliverNow(second, 5_000), true);
    assert.deepEqual(requests, [first, second, second]);
    assert.equal(connections, 2, "the first connection served the first callback and the dropped request");
    assert.deepEqual(
      outbox.attempts(second).map((a) => [a.status_code, a.error]),
      [[200, null]],
      "one attempt, answered on the new connection",
    );
  });
});
