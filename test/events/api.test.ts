import assert from "node:assert/strict";
import { after, before, describe, type TestContext, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { freePort } from "../../support/loopback.js";
import { buildTestApp, TEST_SECRET, type TestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { startReceiver, startUpstream, verifyStandardWebhook } from "../helpers/http.js";

// The events API (`GET /v1/events`, `POST /v1/events/{id}/redeliver`) on an agent with a real Caddy, whose
// route changes write the events, and real loopback receivers (or a port where nothing listens).

const WAIT_MS = 10_000;

type Attempt = { attempt: number; status_code: number | null; error: string | null };
type EventView = {
  id: string;
  type: string;
  url: string;
  state: string;
  created_at: string;
  ordering_key: string | null;
  next_attempt_at: string | null;
  delivered_at: string | null;
  redelivered_at: string | null;
  last_error: string | null;
  attempt_count: number;
  attempts: Attempt[];
  payload: { type: string; timestamp: string; data: Record<string, unknown> };
};

async function setup(t: TestContext, schedule: string) {
  const caddy = await startCaddy(t);
  const h = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_WEBHOOK_RETRY_SCHEDULE: schedule,
  });
  const up = await startUpstream(t, "u");
  const create = async (domain: string, callbackUrl: string) => {
    const res = await h.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: { domain, upstreams: [{ dial: `127.0.0.1:${up.port}` }], callback_url: callbackUrl },
    });
    assert.equal(res.statusCode, 201, res.body);
  };
  return { ...h, create };
}

async function list(h: TestApp, query = ""): Promise<EventView[]> {
  const res = await h.call({ method: "GET", url: `/v1/events${query}` });
  assert.equal(res.statusCode, 200, res.body);
  return res.json().events;
}

/** Polls the listing (bounded) until `done` holds for it. */
async function waitForEvents(
  h: TestApp,
  query: string,
  done: (events: EventView[]) => boolean,
  what: string,
): Promise<EventView[]> {
  const end = Date.now() + WAIT_MS;
  for (;;) {
    const events = await list(h, query);
    if (done(events)) return events;
    if (Date.now() > end) throw new Error(`${what} not within ${WAIT_MS} ms: ${JSON.stringify(events)}`);
    await sleep(20);
  }
}

describe("redeliver", () => {
  test("a dead event goes out again under the same webhook-id once the receiver is up, signed", async (t) => {
    // One retry, 0.1 s after the first attempt; then the event is dead.
    const h = await setup(t, "0.1");
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/hook`;
    await h.create("dead.test", url);
    // The backup dies first; the route_change waits for it (same route, same receiver), then dies too.
    const dead = await waitForEvents(h, "?state=dead", (e) => e.length === 2, "both events dead");
    const [change, backup] = dead;
    assert.ok(change && backup);
    assert.deepEqual(
      [backup.type, change.type],
      ["route_backup", "route_change"],
      "newest first: the outcome, then the backup",
    );
    for (const ev of dead) {
      assert.equal(ev.url, url);
      assert.equal(ev.attempt_count, 2);
      assert.deepEqual(
        ev.attempts.map((a) => [a.attempt, a.status_code]),
        [
          [1, null],
          [2, null],
        ],
      );
      assert.match(String(ev.attempts[1]?.error), /ECONNREFUSED/);
      assert.equal(ev.last_error, ev.attempts[1]?.error);
      assert.equal(ev.next_attempt_at, null);
      assert.equal(ev.ordering_key, backup.ordering_key);
    }

    const rx = await startReceiver(t, { port });
    const res = await h.call({ method: "POST", url: `/v1/events/${backup.id}/redeliver` });
    assert.equal(res.statusCode, 202, res.body);
    const pending = res.json() as EventView;
    assert.equal(pending.id, backup.id);
    assert.equal(pending.state, "pending");
    assert.ok(pending.redelivered_at && pending.next_attempt_at);
    assert.equal(pending.attempts.length, 2, "the earlier attempts stay listed");

    await rx.waitFor(1, WAIT_MS);
    const got = rx.received[0];
    assert.ok(got);
    assert.equal(got.headers["webhook-id"], backup.id, "the same webhook-id: the receiver's idempotency key");
    assert.ok(verifyStandardWebhook(TEST_SECRET, got), "signature verifies");
    assert.deepEqual(JSON.parse(got.body), backup.payload, "the same body as first written");
    assert.ok(
      Number(got.headers["webhook-timestamp"]) >= Math.floor(Date.parse(pending.redelivered_at) / 1000),
      "the timestamp is the new attempt's",
    );

    const [delivered] = await waitForEvents(
      h,
      "?state=delivered",
      (e) => e.length === 1,
      "the redelivered backup delivered",
    );
    assert.equal(delivered?.id, backup.id);
    assert.deepEqual(
      delivered?.attempts.map((a) => [a.attempt, a.status_code]),
      [
        [1, null],
        [2, null],
        [3, 200],
      ],
      "attempt numbers go on",
    );
    assert.ok(delivered?.delivered_at);
    // The dead route_change stays dead until it is asked for too.
    assert.deepEqual(
      (await list(h, "?state=dead")).map((e) => e.id),
      [change.id],
    );
  });

  test("a delivered event can be sent again; it arrives with the same id and body", async (t) => {
    const h = await setup(t, "60");
    const rx = await startReceiver(t);
    await h.create("again.test", rx.url);
    // The answer waited for both first attempts.
    assert.equal(rx.received.length, 2);
    const [change] = await list(h, "?type=route_change");
    assert.ok(change);
    assert.equal(change.state, "delivered");
    const res = await h.call({ method: "POST", url: `/v1/events/${change.id}/redeliver` });
    assert.equal(res.statusCode, 202, res.body);
    await rx.waitFor(3, WAIT_MS);
    const [first, again] = rx.received.filter((w) => w.headers["webhook-id"] === change.id);
    assert.ok(first && again);
    assert.equal(again.body, first.body);
    assert.ok(verifyStandardWebhook(TEST_SECRET, again));
  });

  test("409 for an event still pending, and it stays on its schedule", async (t) => {
    const h = await setup(t, "60");
    await h.create("waiting.test", `http://127.0.0.1:${await freePort()}/hook`);
    const [backup] = await list(h, "?type=route_backup");
    assert.ok(backup);
    assert.equal(backup.state, "pending");
    const res = await h.call({ method: "POST", url: `/v1/events/${backup.id}/redeliver` });
    assert.equal(res.statusCode, 409, res.body);
    assert.equal(res.json().code, "event_pending");
    const [after] = await list(h, "?type=route_backup");
    assert.deepEqual(after, backup);
  });

  test("404 for an unknown event", async (t) => {
    const h = await setup(t, "60");
    const res = await h.call({
      method: "POST",
      url: "/v1/events/msg_00000000-0000-0000-0000-000000000000/redeliver",
    });
    assert.equal(res.statusCode, 404, res.body);
    assert.equal(res.json().code, "event_not_found");
  });
});

describe("listing", () => {
  test("filters by state and type, newest first, bounded by limit", async (t) => {
    const h = await setup(t, "60");
    const rx = await startReceiver(t);
    const down = `http://127.0.0.1:${await freePort()}/hook`;
    await h.create("one.test", rx.url);
    await h.create("two.test", down);
    await h.create("three.test", rx.url);

    const all = await list(h);
    assert.deepEqual(
      all.map((e) => [e.type, e.payload.data.route_id]),
      [
        ["route_change", "three.test"],
        ["route_backup", "three.test"],
        ["route_change", "two.test"],
        ["route_backup", "two.test"],
        ["route_change", "one.test"],
        ["route_backup", "one.test"],
      ],
    );
    assert.deepEqual(
      (await list(h, "?state=pending")).map((e) => [e.type, e.payload.data.route_id]),
      [
        ["route_change", "two.test"],
        ["route_backup", "two.test"],
      ],
    );
    assert.deepEqual(
      (await list(h, "?state=delivered&type=route_backup")).map((e) => e.payload.data.route_id),
      ["three.test", "one.test"],
    );
    assert.deepEqual(await list(h, "?state=dead"), []);
    assert.deepEqual(await list(h, "?type=operator_update"), []);
    assert.deepEqual(
      (await list(h, "?limit=1")).map((e) => [e.type, e.payload.data.route_id]),
      [["route_change", "three.test"]],
    );
    // The pending backup: its failed first attempt is listed, and when the next one is due.
    const [, waiting] = await list(h, "?state=pending");
    assert.equal(waiting?.attempts.length, 1);
    assert.ok(waiting?.next_attempt_at && Date.parse(waiting.next_attempt_at) > Date.now() + 30_000);
    // The route_change behind it has not been tried: its backup must go first.
    const [blocked] = await list(h, "?state=pending&type=route_change");
    assert.equal(blocked?.attempts.length, 0);
  });
});

describe("listing: 400 for a query it does not take", () => {
  const cleanups: (() => unknown)[] = [];
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  let h: TestApp;
  before(async () => {
    h = await buildTestApp(
      { after: (fn: () => unknown) => cleanups.push(fn) },
      { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9" },
    );
  });
  test("?type=<unknown> names the field and the allowed types", async () => {
    const res = await h.call({ method: "GET", url: "/v1/events?type=route_deleted" });
    assert.equal(res.statusCode, 400, res.body);
    const problem = res.json();
    assert.equal(problem.code, "validation_failed");
    assert.deepEqual(problem.errors, [
      {
        field: "querystring.type",
        message: "must be one of: route_backup, route_change, operator_update, system_update, agent_update",
      },
    ]);
  });

  for (const query of [
    "state=gone",
    "state=dead&state=pending",
    "limit=0",
    "limit=501",
    "limit=x",
    "type=Route-Backup",
    "other=1",
  ])
    test(`?${query}`, async () => {
      const res = await h.call({ method: "GET", url: `/v1/events?${query}` });
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(res.json().code, "validation_failed");
    });
});
