import assert from "node:assert/strict";
import { test } from "node:test";
import { buildTestApp, TEST_SECRET } from "../helpers/app.js";
import { startCaddy, startRefusableCaddy } from "../helpers/caddy.js";
import {
  type ReceivedWebhook,
  startReceiver,
  startUpstream,
  verifyStandardWebhook,
} from "../helpers/http.js";
import { loseFirstWriteAnswer } from "./support.js";

// The route_change event: once a change settled, its outcome goes to the change's callback_url, after its
// route_backup, durably and signed. Real Caddy, real loopback receivers.

const route = (domain: string, port: number, callback_url: string) => ({
  domain,
  upstreams: [{ dial: `127.0.0.1:${port}` }],
  callback_url,
});
const upstreamOf = (r: unknown) =>
  (r as { handle: { upstreams: { dial: string }[] }[] } | null)?.handle[0]?.upstreams[0]?.dial;

/** The events of one change as the receiver got them: its backup, then its outcome. */
function pairOf(received: ReceivedWebhook[], changeId: number) {
  const of = received.filter((w) => w.json.data.change_id === changeId);
  assert.deepEqual(
    of.map((w) => w.json.type),
    ["route_backup", "route_change"],
    `change ${changeId}: the backup, then the outcome`,
  );
  for (const w of of) assert.ok(verifyStandardWebhook(TEST_SECRET, w), "signature verifies");
  return { backup: of[0] as ReceivedWebhook, change: (of[1] as ReceivedWebhook).json.data };
}

test("after each applied change, route_change follows its route_backup with the outcome and the new route", async (t) => {
  const caddy = await startCaddy(t);
  const { call, app } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  const a = await startUpstream(t, "a");
  const b = await startUpstream(t, "b");
  const rx = await startReceiver(t);
  const history = async () =>
    (await call({ method: "GET", url: "/v1/proxy/routes/rc.test/history" })).json().changes as {
      change_id: number;
      backup_event_id: string;
      change_event_id: string;
    }[];

  const created = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("rc.test", a.port, rx.url),
    headers: { "x-request-id": "ctl-7" },
  });
  assert.equal(created.statusCode, 201, created.body);
  // The answer waited for both first attempts.
  assert.equal(rx.received.length, 2);
  const [c] = await history();
  assert.ok(c);
  const create = pairOf(rx.received, c.change_id);
  assert.equal(create.backup.headers["webhook-id"], c.backup_event_id);
  assert.equal(rx.received[1]?.headers["webhook-id"], c.change_event_id);
  assert.notEqual(c.backup_event_id, c.change_event_id);
  assert.deepEqual(create.backup.json.data.request_id, "ctl-7");
  const { finished_at, ...rest } = create.change;
  assert.deepEqual(rest, {
    operation: "create",
    route_id: "rc.test",
    request_id: "ctl-7",
    change_id: c.change_id,
    outcome: "applied",
    route: created.json(),
    error: null,
  });
  assert.ok(Date.parse(String(finished_at)) >= Date.parse(String(create.backup.json.data.captured_at)));

  const put = await call({
    method: "PUT",
    url: "/v1/proxy/routes/rc.test",
    payload: route("rc.test", b.port, rx.url),
  });
  assert.equal(put.statusCode, 200, put.body);
  const replace = pairOf(rx.received, (await history())[0]?.change_id ?? 0);
  assert.deepEqual([replace.change.operation, replace.change.outcome], ["replace", "applied"]);
  assert.deepEqual(replace.change.route, put.json());
  assert.equal(upstreamOf(replace.backup.json.data.previous_route), `127.0.0.1:${a.port}`);

  const del = await call({
    method: "DELETE",
    url: "/v1/proxy/routes/rc.test",
    payload: { callback_url: rx.url },
  });
  assert.equal(del.statusCode, 204);
  const deletion = (await history())[0]?.change_id ?? 0;
  const removed = pairOf(rx.received, deletion);
  assert.deepEqual(
    [removed.change.operation, removed.change.outcome, removed.change.route],
    ["delete", "applied", null],
  );

  const restored = await call({
    method: "POST",
    url: "/v1/proxy/routes/rc.test/restore",
    payload: { change_id: deletion, callback_url: rx.url },
  });
  assert.equal(restored.statusCode, 200, restored.body);
  const restore = pairOf(rx.received, restored.json().change_id);
  assert.deepEqual(
    [
      restore.backup.json.data.operation,
      restore.backup.json.data.restored_from,
      restore.backup.json.data.previous_route,
    ],
    ["restore", deletion, null],
  );
  assert.deepEqual(
    [restore.change.operation, restore.change.restored_from, restore.change.outcome],
    ["restore", deletion, "applied"],
  );
  assert.deepEqual(restore.change.route, put.json());
  assert.equal(rx.received.length, 8);

  // Written in the outbox with one ordering key for the route and the receiver.
  const keys = app.services.db.prepare("SELECT DISTINCT ordering_key FROM outbox_events").all();
  assert.deepEqual(keys, [{ ordering_key: `route:rc.test ${rx.url}` }]);
});

test("a change Caddy refuses is reported as failed, with the route Caddy kept; a failed create, with none", async (t) => {
  const { caddy, dir, refuse } = await startRefusableCaddy(t);
  const { call } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  const old = await startUpstream(t, "old");
  const next = await startUpstream(t, "new");
  const rx = await startReceiver(t);
  const created = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("kept.test", old.port, rx.url),
  });
  assert.equal(created.statusCode, 201);

  refuse();
  const put = await call({
    method: "PUT",
    url: "/v1/proxy/routes/kept.test",
    payload: route("kept.test", next.port, rx.url),
  });
  assert.equal(put.statusCode, 503, put.body);
  assert.equal(put.json().code, "proxy_rejected_change");
  const failed = rx.received.slice(2);
  assert.deepEqual(
    failed.map((w) => w.json.type),
    ["route_backup", "route_change"],
  );
  const change = failed[1]?.json.data as Record<string, unknown>;
  assert.equal(change.change_id, failed[0]?.json.data.change_id);
  assert.deepEqual([change.operation, change.outcome], ["replace", "failed"]);
  assert.deepEqual(change.route, created.json(), "Caddy kept the route it had");
  assert.match(String(change.error), /loading certificates: open \[path\]: no such file/);
  assert.equal(String(change.error).includes(dir), false, "no file path leaves the agent");

  const fresh = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("fresh.test", old.port, rx.url),
  });
  assert.equal(fresh.statusCode, 503);
  const last = rx.received.at(-1)?.json;
  assert.deepEqual(
    [last?.type, last?.data.operation, last?.data.outcome, last?.data.route],
    ["route_change", "create", "failed", null],
  );
});

test("a change rolled back is reported as rolled_back, with the route put back", async (t) => {
  const caddy = await startCaddy(t);
  const { call, app } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  const old = await startUpstream(t, "old");
  const next = await startUpstream(t, "new");
  const rx = await startReceiver(t);
  const created = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("rb.test", old.port, rx.url),
  });
  assert.equal(created.statusCode, 201);
  // Someone else's change lands right after the agent's (else the agent finds its own change applied).
  loseFirstWriteAnswer(t, app.services.caddyAdmin, {
    afterFirst: () =>
      caddy.admin.write("POST", "/config/apps/http/servers/srv0/routes", {
        match: [{ host: ["foreign.test"] }],
        handle: [{ handler: "static_response" }],
      }),
  });
  const put = await call({
    method: "PUT",
    url: "/v1/proxy/routes/rb.test",
    payload: route("rb.test", next.port, rx.url),
  });
  assert.equal(put.statusCode, 503, put.body);
  const last = rx.received.at(-1)?.json;
  assert.deepEqual(
    [last?.type, last?.data.operation, last?.data.outcome],
    ["route_change", "replace", "rolled_back"],
  );
  assert.deepEqual(last?.data.route, created.json());
  assert.match(String(last?.data.error), /restored/);
});

test("with the receiver failing at first, the outcome still arrives after its backup, held back until the backup is in", async (t) => {
  const caddy = await startCaddy(t);
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_WEBHOOK_RETRY_SCHEDULE: "0.2,0.2",
  });
  const up = await startUpstream(t, "u");
  const rx = await startReceiver(t, { status: (n) => (n === 0 ? 503 : 200) });
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("late.test", up.port, rx.url),
  });
  assert.equal(res.statusCode, 201);
  await rx.waitFor(2, 10_000);
  assert.deepEqual(
    rx.requests.map((r) => [r.json.type, r.status]),
    [
      ["route_backup", 503],
      ["route_backup", 200],
      ["route_change", 200],
    ],
    "the outcome was not tried before its backup was delivered",
  );
});

test("a change without callback_url sends no event", async (t) => {
  const caddy = await startCaddy(t);
  const { call, app } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  const up = await startUpstream(t, "u");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: { domain: "quiet.test", upstreams: [{ dial: `127.0.0.1:${up.port}` }] },
  });
  assert.equal(res.statusCode, 201);
  assert.deepEqual(app.services.db.prepare("SELECT count(*) AS n FROM outbox_events").get(), { n: 0 });
});
