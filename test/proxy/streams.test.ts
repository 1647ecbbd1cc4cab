import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { writeAtomically } from "../../src/operator/artifacts/files.js";
import { routesHaveDelay } from "../../src/proxy/route/streams.js";
import { connectWs, startEchoServer, type WsClient } from "../../support/websocket.js";
import { buildTestApp } from "../helpers/app.js";
import { caddyMetric, startCaddy, type TestCaddy } from "../helpers/caddy.js";
import { viaProxy } from "../helpers/http.js";

type After = { after: (fn: () => unknown) => void };

const OPERATOR = "op.streams.test";
const routesPath = "/config/apps/http/servers/srv0/routes";

async function echoServer(t: After, body?: string) {
  const s = await startEchoServer(body);
  t.after(() => s.close());
  return s;
}

async function ws(t: After, caddy: TestCaddy, host: string): Promise<WsClient> {
  const c = await connectWs(caddy.httpPort, host);
  t.after(() => c.close());
  return c;
}

const write = (domain: string, port: number, extra: Record<string, unknown> = {}) => ({
  domain,
  upstreams: [{ dial: `127.0.0.1:${port}` }],
  ...extra,
});

/** Caddy's last successful config load: a new value means a reload. */
const lastReload = (caddy: TestCaddy) =>
  caddyMetric(caddy.admin, "caddy_config_last_reload_success_timestamp_seconds");

test("a websocket through one route keeps echoing across changes to other routes and to the operator's route", {
  timeout: 120_000,
}, async (t) => {
  const caddy = await startCaddy(t);
  const { call, app } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_OPERATOR_DOMAIN: OPERATOR,
  });
  const echo = await echoServer(t);
  const other = await echoServer(t, "other");
  const created = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: write("a.streams.test", echo.port),
  });
  assert.equal(created.statusCode, 201, created.body);
  assert.equal(created.json().handle[0].stream_close_delay, "2m");

  const stream = await ws(t, caddy, "a.streams.test");
  assert.equal(await stream.echo("before"), "before");
  const before = await lastReload(caddy);

  const changes: [string, string, unknown?][] = [
    ["POST", "/v1/proxy/routes", write("b.streams.test", other.port)],
    ["PUT", "/v1/proxy/routes/b.streams.test", write("b.streams.test", other.port, { terminal: false })],
    ["DELETE", "/v1/proxy/routes/b.streams.test"],
  ];
  for (const [method, url, payload] of changes) {
    const res = await call({ method, url, ...(payload === undefined ? {} : { payload }) });
    assert.ok(res.statusCode < 300, `${method} ${url}: ${res.body}`);
    assert.equal(await stream.echo(`after ${method}`), `after ${method}`);
  }

  // The operator's route as the agent writes it: first pointing at a file Caddy reads per request, then
  // answering 503, then back; each a reload of Caddy's config.
  const dir = mkdtempSync(join(tmpdir(), "hk-streams-op-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const upstreamFile = join(dir, "upstream");
  writeFileSync(upstreamFile, `127.0.0.1:${other.port}`);
  const routes = app.services.routes;
  const proxied = { handler: "reverse_proxy", upstreams: [{ dial: `{file.${upstreamFile}}` }] };
  const unavailable = { handler: "static_response", status_code: 503, body: "operator unavailable" };
  for (const handle of [proxied, unavailable, proxied]) {
    await routes.put({ "@id": OPERATOR, match: [{ host: [OPERATOR] }], handle: [handle], terminal: true });
    assert.equal(await stream.echo("after operator"), "after operator");
  }
  const op = await call({ method: "GET", url: `/v1/proxy/routes/${OPERATOR}` });
  assert.equal(op.json().handle[0].stream_close_delay, "2m", "the operator's route keeps its streams too");
  assert.equal((await viaProxy(caddy.httpPort, OPERATOR)).body, "other");
  // The operator's switch itself: the file is replaced, Caddy's config stays as it is.
  const third = await echoServer(t, "third");
  const reloads = await lastReload(caddy);
  await writeAtomically(upstreamFile, `127.0.0.1:${third.port}`);
  assert.equal((await viaProxy(caddy.httpPort, OPERATOR)).body, "third");
  assert.equal(await stream.echo("after switch"), "after switch");
  assert.equal(await lastReload(caddy), reloads, "the switch does not reload Caddy");

  assert.ok((await lastReload(caddy)) > before, "the changes did reload Caddy");
  assert.ok(stream.isOpen());
});

test("streams through a route that is replaced or deleted are closed once the configured delay has passed", {
  timeout: 120_000,
}, async (t) => {
  const caddy = await startCaddy(t);
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_STREAM_CLOSE_DELAY_MS: "3000",
  });
  const oldUp = await echoServer(t, "old");
  const newUp = await echoServer(t, "new");
  for (const d of ["replaced.streams.test", "deleted.streams.test"]) {
    const r = await call({ method: "POST", url: "/v1/proxy/routes", payload: write(d, oldUp.port) });
    assert.equal(r.statusCode, 201, r.body);
    assert.equal(r.json().handle[0].stream_close_delay, "3s");
  }
  const replaced = await ws(t, caddy, "replaced.streams.test");
  const deleted = await ws(t, caddy, "deleted.streams.test");
  assert.equal(await replaced.echo("x"), "x");
  assert.equal(await deleted.echo("y"), "y");
  assert.equal(oldUp.open(), 2);

  const put = await call({
    method: "PUT",
    url: "/v1/proxy/routes/replaced.streams.test",
    payload: write("replaced.streams.test", newUp.port),
  });
  assert.equal(put.statusCode, 200, put.body);
  const del = await call({ method: "DELETE", url: "/v1/proxy/routes/deleted.streams.test" });
  assert.equal(del.statusCode, 204, del.body);

  // Closed by Caddy (the old config's handler, its delay over), not by either end of the test.
  let timer: NodeJS.Timeout | undefined;
  const how = await Promise.race([
    Promise.all([replaced.closed, deleted.closed]),
    new Promise<string>((r) => {
      timer = setTimeout(() => r("still open"), 60_000);
    }),
  ]);
  clearTimeout(timer);
  assert.notEqual(how, "still open");
  assert.deepEqual(how, ["close frame", "close frame"], "Caddy closes a websocket with a close frame");
  // The upstream's side of those streams is closed too, and a new stream reaches the new upstream.
  for (let i = 0; i < 100 && oldUp.open() > 0; i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal(oldUp.open(), 0);
  const fresh = await ws(t, caddy, "replaced.streams.test");
  assert.equal(await fresh.echo("z"), "z");
  assert.equal(newUp.open(), 1);
});

test("a change that changes nothing is answered and recorded without a write to Caddy or a reload", {
  timeout: 60_000,
}, async (t) => {
  const caddy = await startCaddy(t);
  const { call } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  const echo = await echoServer(t);
  const body = write("same.streams.test", echo.port);
  assert.equal((await call({ method: "POST", url: "/v1/proxy/routes", payload: body })).statusCode, 201);
  const stream = await ws(t, caddy, "same.streams.test");
  const writes = () => caddyMetric(caddy.admin, "caddy_admin_http_requests_total", { method: "PATCH" });
  const reload = await lastReload(caddy);
  const patches = await writes();

  const res = await call({ method: "PUT", url: "/v1/proxy/routes/same.streams.test", payload: body });
  assert.equal(res.statusCode, 200, res.body);
  assert.deepEqual(
    res.json(),
    (await call({ method: "GET", url: "/v1/proxy/routes/same.streams.test" })).json(),
  );

  assert.equal(await lastReload(caddy), reload, "no reload");
  assert.equal(await writes(), patches, "no write reached Caddy");
  const history = (await call({ method: "GET", url: "/v1/proxy/routes/same.streams.test/history" })).json();
  assert.equal(history.changes[0].operation, "replace");
  assert.equal(history.changes[0].outcome, "applied");
  assert.deepEqual(history.changes[0].previous_route, history.changes[0].requested_route);
  assert.equal(await stream.echo("still"), "still");

  // A change that does change the route still reaches Caddy.
  const changed = await call({
    method: "PUT",
    url: "/v1/proxy/routes/same.streams.test",
    payload: { ...body, terminal: false },
  });
  assert.equal(changed.statusCode, 200, changed.body);
  assert.ok((await lastReload(caddy)) > reload);
});

test("at start the agent gives existing routes stream_close_delay and Caddy's HTTP app a grace_period", {
  timeout: 60_000,
}, async (t) => {
  const caddy = await startCaddy(t);
  const foreign = {
    "@id": "foreign.streams.test",
    match: [{ host: ["foreign.streams.test"] }],
    handle: [{ handler: "reverse_proxy", upstreams: [{ dial: "127.0.0.1:9" }] }],
    terminal: true,
  };
  const plain = { match: [{ path: ["/static"] }], handle: [{ handler: "static_response", body: "s" }] };
  await caddy.admin.write("PATCH", routesPath, [foreign, plain]);
  const first = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_STREAM_CLOSE_DELAY_MS: "90000",
    HOSTKEEPER_CADDY_GRACE_PERIOD_MS: "7000",
  });
  await first.app.services.writer.whenIdle();
  const routes = JSON.parse((await caddy.admin.read(routesPath)).text);
  assert.deepEqual(routes, [
    { ...foreign, handle: [{ ...foreign.handle[0], stream_close_delay: "90s" }] },
    plain,
  ]);
  assert.equal(JSON.parse((await caddy.admin.read("/config/apps/http/grace_period")).text), "7s");
  // The next start tells from Caddy's text alone that every handler has the delay, without parsing routes.
  const text = (await caddy.admin.read(routesPath)).text;
  assert.equal(routesHaveDelay(text, 90_000), true);
  assert.equal(routesHaveDelay(text, 60_000), false);
  assert.equal(routesHaveDelay(text, 0), false);

  // A second start finds nothing to change: no reload.
  const reload = await lastReload(caddy);
  const second = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_STREAM_CLOSE_DELAY_MS: "90000",
    HOSTKEEPER_CADDY_GRACE_PERIOD_MS: "7000",
  });
  await second.app.services.writer.whenIdle();
  assert.equal(await lastReload(caddy), reload);
});

test("a managed server the agent creates comes with the grace_period", { timeout: 60_000 }, async (t) => {
  const caddy = await startCaddy(t, { withServer: false });
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${caddy.httpPort}`,
  });
  const echo = await echoServer(t);
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: write("new.streams.test", echo.port),
  });
  assert.equal(res.statusCode, 201, res.body);
  assert.equal(JSON.parse((await caddy.admin.read("/config/apps/http/grace_period")).text), "10s");
});
