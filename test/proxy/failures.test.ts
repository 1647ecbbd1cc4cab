import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type TestContext, test } from "node:test";
import { freePort } from "../../support/loopback.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy, startRefusableCaddy } from "../helpers/caddy.js";
import { startReceiver, startUpstream, viaProxy } from "../helpers/http.js";
import { loseFirstWriteAnswer } from "./support.js";

const route = (domain: string, port: number) => ({ domain, upstreams: [{ dial: `127.0.0.1:${port}` }] });

test("a change Caddy refuses leaves the previous route serving traffic", async (t) => {
  // Caddy re-reads TLS certificate files on every config change; a file that vanished makes it refuse
  // any change while the running config keeps serving: a real refusal, not a simulated one.
  const { caddy, dir, refuse, accept } = await startRefusableCaddy(t);
  const { call, app } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  const old = await startUpstream(t, "old");
  const next = await startUpstream(t, "new");
  assert.equal(
    (await call({ method: "POST", url: "/v1/proxy/routes", payload: route("refuse.test", old.port) }))
      .statusCode,
    201,
  );

  refuse();
  const put = await call({
    method: "PUT",
    url: "/v1/proxy/routes/refuse.test",
    payload: route("refuse.test", next.port),
  });
  assert.equal(put.statusCode, 503, put.body);
  assert.equal(put.json().code, "proxy_rejected_change");
  // Caddy's words stay, the file it names does not: the detail reaches clients, the path only the log.
  assert.match(put.json().detail, /loading certificates: open \[path\]: no such file/);
  assert.equal(put.json().detail.includes(dir), false);
  assert.equal((await viaProxy(caddy.httpPort, "refuse.test")).body, "old");
  const del = await call({ method: "DELETE", url: "/v1/proxy/routes/refuse.test" });
  assert.equal(del.statusCode, 503);
  assert.equal((await viaProxy(caddy.httpPort, "refuse.test")).body, "old");
  const rows = app.services.db.prepare("SELECT operation, outcome FROM route_changes ORDER BY id").all();
  assert.deepEqual(rows, [
    { operation: "create", outcome: "applied" },
    { operation: "replace", outcome: "failed" },
    { operation: "delete", outcome: "failed" },
  ]);

  accept();
  assert.equal(
    (
      await call({
        method: "PUT",
        url: "/v1/proxy/routes/refuse.test",
        payload: route("refuse.test", next.port),
      })
    ).statusCode,
    200,
  );
  assert.equal((await viaProxy(caddy.httpPort, "refuse.test")).body, "new");
});

/** A route put in Caddy by someone else, so the routes match neither the state before a write nor after it. */
const foreign = {
  "@id": "foreign.test",
  match: [{ host: ["foreign.test"] }],
  handle: [{ handler: "static_response" }],
};
const ROUTES = "/config/apps/http/servers/srv0/routes";

/** The agent on a real Caddy holding `domain`, served by an upstream answering "old"; "new" answers besides. */
async function withRoute(t: TestContext, domain: string) {
  const caddy = await startCaddy(t);
  const { call, app } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  const old = await startUpstream(t, "old");
  const next = await startUpstream(t, "new");
  const created = await call({ method: "POST", url: "/v1/proxy/routes", payload: route(domain, old.port) });
  assert.equal(created.statusCode, 201, created.body);
  return { caddy, call, app, old, next };
}

test("a write whose answer broke off after Caddy applied it is found applied: the routes read back are the plan's", async (t) => {
  const { caddy, call, app, next } = await withRoute(t, "ok.test");
  const writes = loseFirstWriteAnswer(t, app.services.caddyAdmin);
  const put = await call({
    method: "PUT",
    url: "/v1/proxy/routes/ok.test",
    payload: route("ok.test", next.port),
  });
  assert.equal(put.statusCode, 200, put.body);
  assert.equal(writes(), 1, "nothing was restored");
  assert.equal((await viaProxy(caddy.httpPort, "ok.test")).body, "new");
  const row = app.services.db.prepare("SELECT outcome FROM route_changes WHERE operation = 'replace'").get();
  assert.deepEqual(row, { outcome: "applied" });
});

test("a write that fails after Caddy may have changed, with routes read back that are not the plan's, is rolled back to the captured state", async (t) => {
  const { caddy, call, app, next } = await withRoute(t, "rb.test");
  // Someone else's change lands right after the agent's, so the routes read back are not the plan's.
  loseFirstWriteAnswer(t, app.services.caddyAdmin, {
    afterFirst: () => caddy.admin.write("POST", ROUTES, foreign),
  });
  const put = await call({
    method: "PUT",
    url: "/v1/proxy/routes/rb.test",
    payload: route("rb.test", next.port),
  });
  assert.equal(put.statusCode, 503, put.body);
  assert.equal(put.json().code, "proxy_unavailable");
  assert.match(put.json().detail, /restored/);
  assert.equal((await viaProxy(caddy.httpPort, "rb.test")).body, "old");
  const row = app.services.db.prepare("SELECT outcome FROM route_changes WHERE operation = 'replace'").get();
  assert.deepEqual(row, { outcome: "rolled_back" });
});

test("when the rollback fails too, the answer says so and carries the captured state", async (t) => {
  const { caddy, call, app, old } = await withRoute(t, "rbf.test");
  const writes = loseFirstWriteAnswer(t, app.services.caddyAdmin, {
    afterFirst: () => caddy.admin.write("POST", ROUTES, foreign),
    failLater: true,
  });
  const del = await call({ method: "DELETE", url: "/v1/proxy/routes/rbf.test" });
  assert.equal(del.statusCode, 503, del.body);
  const body = del.json();
  assert.equal(body.code, "proxy_rollback_failed");
  assert.equal(body.captured_state["@id"], "rbf.test");
  assert.deepEqual(body.captured_state.handle[0].upstreams, [{ dial: `127.0.0.1:${old.port}` }]);
  assert.ok(writes() >= 2, "a restore was attempted");
});

test("callbacks to denied addresses are refused at connect time, not only at parse time", async (t) => {
  const caddy = await startCaddy(t);
  const { call, app } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_WEBHOOK_DENY_CIDRS: "127.0.0.1/32,::1/128,169.254.0.0/16",
    HOSTKEEPER_WEBHOOK_RETRY_SCHEDULE: "60",
  });
  const up = await startUpstream(t, "u");
  const rx = await startReceiver(t);
  // A name passes the parse-time check; the address it resolves to is what gets refused.
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: { ...route("deny.test", up.port), callback_url: `http://localhost:${rx.port}/hook` },
  });
  assert.equal(res.statusCode, 201, res.body);
  assert.equal(rx.received.length, 0);
  const attempt = app.services.db.prepare("SELECT error FROM outbox_attempts").get() as { error: string };
  assert.match(attempt.error, /denied/);
  // An IP literal in the deny list is refused when the request is made.
  const lit = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: { ...route("deny2.test", up.port), callback_url: `http://127.0.0.1:${rx.port}/hook` },
  });
  assert.equal(lit.statusCode, 400);
});

test("events still pending when the agent stops are delivered after it starts again", async (t) => {
  const caddy = await startCaddy(t);
  const dataDir = mkdtempSync(join(tmpdir(), "hk-data-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();
  const env = { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, HOSTKEEPER_WEBHOOK_RETRY_SCHEDULE: "1,1,1" };
  const up = await startUpstream(t, "u");
  const first = await buildTestApp(t, env, { dataDir });
  const res = await first.call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: { ...route("later.test", up.port), callback_url: `http://127.0.0.1:${port}/hook` },
  });
  assert.equal(res.statusCode, 201);
  await first.app.close();

  const rx = await startReceiver(t, { port });
  await buildTestApp(t, env, { dataDir });
  await rx.waitFor(1, 10_000);
  assert.equal(rx.received[0]?.json.data.route_id, "later.test");
});
