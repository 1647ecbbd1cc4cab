import assert from "node:assert/strict";
import { test } from "node:test";
import { canonicalJson } from "../../src/util/canonical-json.js";
import { connectWs, startEchoServer } from "../../support/websocket.js";
import { startReceiver } from "../helpers/http.js";
import { basic, bcryptHash, recordingUpstream, send } from "./policy-support.js";
import { setup } from "./support.js";

/*
 * Routes with policies through the guarantees every change has: reading back, host ownership, backups,
 * history and restore.
 */

const dial = (port: number) => [{ dial: `127.0.0.1:${port}` }];

test("a route reads back as the write request that makes it, normalised; a route changed in Caddy or written by hand has none", async (t) => {
  const { caddy, call, up } = await setup(t);
  const api = await recordingUpstream(t, "api");
  const hash = bcryptHash("pw");
  const written = {
    domain: "Read.Test.",
    upstreams: [{ dial: `LocalHost.:${up.port}` }],
    redirect_from: ["WWW.read.test"],
    paths: [
      { prefix: "/a", upstreams: dial(api.port) },
      { prefix: "/a/b", upstreams: dial(api.port), strategy: "weighted_round_robin", strip_prefix: true },
    ],
    basic_auth: { users: [{ username: "{u}", password_hash: hash }] },
    headers: { response: { set: { "X-A": "{env.HOME}" } } },
    maintenance: { body: "{x}" },
    encode: ["gzip"],
    callback_url: null,
  };
  let res = await call({ method: "POST", url: "/v1/proxy/routes", payload: written });
  assert.equal(res.statusCode, 201, res.body);
  res = await call({ method: "GET", url: "/v1/proxy/routes/read.test/request" });
  assert.equal(res.statusCode, 200, res.body);
  assert.deepEqual(res.json(), {
    domain: "read.test",
    terminal: true,
    upstreams: [{ dial: `localhost:${up.port}` }],
    strategy: "first",
    redirect_from: ["www.read.test"],
    redirect_status: 308,
    basic_auth: { realm: "read.test", users: [{ username: "{u}", password_hash: hash }] },
    encode: ["gzip"],
    headers: { response: { set: { "X-A": "{env.HOME}" } } },
    maintenance: { status: 503, body: "{x}", content_type: "text/html; charset=utf-8" },
    paths: [
      {
        prefix: "/a/b",
        upstreams: [{ dial: `127.0.0.1:${api.port}`, weight: 1 }],
        strategy: "weighted_round_robin",
        strip_prefix: true,
      },
      { prefix: "/a", upstreams: dial(api.port), strategy: "first" },
    ],
  });
  // Written again, the normalised request makes the same route.
  const before = (await call({ method: "GET", url: "/v1/proxy/routes/read.test" })).json();
  res = await call({ method: "PUT", url: "/v1/proxy/routes/read.test", payload: res.json() });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(canonicalJson(res.json()), canonicalJson(before));

  // Changed in Caddy behind the agent's back into what no write request makes: a live placeholder.
  const path = "/id/read.test/handle/0/routes/2/handle/2/response/set/X-A";
  const patched = await caddy.admin.raw("PATCH", path, { body: JSON.stringify(["{env.HOME}"]) });
  assert.equal(patched.status, 200, patched.text);
  res = await call({ method: "GET", url: "/v1/proxy/routes/read.test/request" });
  assert.equal(res.statusCode, 409, res.body);
  assert.equal(res.json().code, "route_request_unknown");

  const hand = {
    "@id": "hand.test",
    match: [{ host: ["hand.test"] }],
    handle: [{ handler: "static_response" }],
  };
  const added = await caddy.admin.raw("POST", "/config/apps/http/servers/srv0/routes", {
    body: JSON.stringify(hand),
  });
  assert.equal(added.status, 200, added.text);
  res = await call({ method: "GET", url: "/v1/proxy/routes/hand.test/request" });
  assert.equal(res.statusCode, 409, res.body);
  res = await call({ method: "GET", url: "/v1/proxy/routes/none.test/request" });
  assert.equal(res.statusCode, 404, res.body);
});

test("a host belongs to one route: a domain or redirect_from host another route serves is 409 naming it, freed when that route goes", async (t) => {
  const { call, up } = await setup(t);
  const post = (payload: object) => call({ method: "POST", url: "/v1/proxy/routes", payload });
  const body = (domain: string, extra: object = {}) => ({ domain, upstreams: dial(up.port), ...extra });
  assert.equal((await post(body("a.test", { redirect_from: ["www.a.test"] }))).statusCode, 201);
  assert.equal((await post(body("b.test"))).statusCode, 201);
  const routesBefore = (await call({ method: "GET", url: "/v1/proxy/routes" })).body;

  const conflicts: [string, object, string, string][] = [
    ["POST", body("WWW.a.test"), "www.a.test", "a.test"],
    ["POST", body("c.test", { redirect_from: ["a.test"] }), "a.test", "a.test"],
    ["POST", body("c.test", { redirect_from: ["x.test", "b.test"] }), "b.test", "b.test"],
    ["PUT", body("b.test", { redirect_from: ["www.a.test"] }), "www.a.test", "a.test"],
  ];
  for (const [method, payload, host, owner] of conflicts) {
    const url = method === "PUT" ? "/v1/proxy/routes/b.test" : "/v1/proxy/routes";
    const res = await call({ method: method as "POST" | "PUT", url, payload });
    assert.equal(res.statusCode, 409, res.body);
    const problem = res.json();
    assert.equal(problem.code, "host_conflict");
    assert.equal(problem.host, host);
    assert.equal(problem.route_id, owner);
    assert.match(problem.detail, new RegExp(`host ${host} is served by route ${owner}`));
  }
  assert.equal((await call({ method: "GET", url: "/v1/proxy/routes" })).body, routesBefore);
  // Refused before Caddy was touched: like a 404 or a route_exists, nothing to record.
  const history = (await call({ method: "GET", url: "/v1/proxy/routes/b.test/history" })).json().changes;
  assert.deepEqual(
    history.map((c: { operation: string }) => c.operation),
    ["create"],
  );

  // Replacing a route with its own hosts is no conflict.
  let res = await call({
    method: "PUT",
    url: "/v1/proxy/routes/a.test",
    payload: body("a.test", { redirect_from: ["www.a.test", "old.a.test"] }),
  });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal((await call({ method: "DELETE", url: "/v1/proxy/routes/a.test" })).statusCode, 204);
  res = await post(body("www.a.test"));
  assert.equal(res.statusCode, 201, res.body);

  // Putting back the deleted a.test would take www.a.test from its route now: a restore conflict.
  const changes = (await call({ method: "GET", url: "/v1/proxy/routes/a.test/history" })).json().changes;
  const routes = (await call({ method: "GET", url: "/v1/proxy/routes" })).body;
  res = await call({
    method: "POST",
    url: "/v1/proxy/routes/a.test/restore",
    payload: { change_id: changes[0].change_id },
  });
  assert.equal(res.statusCode, 409, res.body);
  assert.equal(res.json().code, "restore_conflict");
  assert.match(res.json().detail, /serves host www\.a\.test, which route www\.a\.test serves now/);
  assert.equal((await call({ method: "GET", url: "/v1/proxy/routes" })).body, routes);
});

test("backups, history and restore carry the policies: a restore puts back the site that was there, traffic included", async (t) => {
  const { caddy, call, up } = await setup(t);
  const receiver = await startReceiver(t);
  const site = {
    domain: "r.test",
    upstreams: dial(up.port),
    redirect_from: ["www.r.test"],
    basic_auth: { users: [{ username: "ana", password_hash: bcryptHash("pw") }] },
    headers: { response: { set: { "X-V": "one" } } },
  };
  let res = await call({ method: "POST", url: "/v1/proxy/routes", payload: site });
  assert.equal(res.statusCode, 201, res.body);
  const first = res.json();
  const request = (await call({ method: "GET", url: "/v1/proxy/routes/r.test/request" })).json();

  res = await call({
    method: "PUT",
    url: "/v1/proxy/routes/r.test",
    payload: {
      domain: "r.test",
      upstreams: dial(up.port),
      maintenance: { body: "down" },
      callback_url: receiver.url,
    },
  });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal((await send(caddy.httpPort, "r.test")).body.toString(), "down");
  await receiver.waitFor(2, 10_000);
  const backup = receiver.received.find((w) => w.json.type === "route_backup")?.json.data;
  assert.equal(canonicalJson(backup?.previous_route), canonicalJson(first));

  const changes = (await call({ method: "GET", url: "/v1/proxy/routes/r.test/history" })).json().changes;
  assert.equal(canonicalJson(changes[0].previous_route), canonicalJson(first));
  res = await call({
    method: "POST",
    url: "/v1/proxy/routes/r.test/restore",
    payload: { change_id: changes[0].change_id },
  });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(res.json().action, "replaced");
  assert.equal(canonicalJson(res.json().route), canonicalJson(first));
  assert.deepEqual((await call({ method: "GET", url: "/v1/proxy/routes/r.test/request" })).json(), request);
  const r = await send(caddy.httpPort, "r.test", { headers: basic("ana", "pw") });
  assert.equal(r.status, 200);
  assert.equal(r.headers["x-v"], "one");
  assert.equal((await send(caddy.httpPort, "www.r.test")).status, 308);
  assert.equal((await send(caddy.httpPort, "r.test")).status, 401);
});

test("a websocket through a path of a route with policies keeps echoing while other routes with policies change", {
  timeout: 120_000,
}, async (t) => {
  const { caddy, call, up } = await setup(t);
  const echo = await startEchoServer();
  t.after(() => echo.close());
  const site = (domain: string) => ({
    domain,
    upstreams: dial(up.port),
    paths: [{ prefix: "/ws", upstreams: dial(echo.port), strip_prefix: true }],
    headers: { request: { set: { "X-Via": "policy" } }, response: { delete: ["X-Powered-By"] } },
    encode: ["gzip"],
  });
  let res = await call({ method: "POST", url: "/v1/proxy/routes", payload: site("ws.test") });
  assert.equal(res.statusCode, 201, res.body);
  const stream = await connectWs(caddy.httpPort, "ws.test", "/ws/chat");
  t.after(() => stream.close());
  assert.equal(await stream.echo("before"), "before");
  const changes: [string, string, unknown?][] = [
    ["POST", "/v1/proxy/routes", { ...site("other.test"), redirect_from: ["www.other.test"] }],
    ["PUT", "/v1/proxy/routes/other.test", { ...site("other.test"), maintenance: {} }],
    ["DELETE", "/v1/proxy/routes/other.test"],
  ];
  for (const [method, url, payload] of changes) {
    res = await call({ method: method as "POST", url, ...(payload === undefined ? {} : { payload }) });
    assert.ok(res.statusCode < 300, `${method} ${url}: ${res.body}`);
    assert.equal(await stream.echo(`after ${method}`), `after ${method}`);
  }
  assert.ok(stream.isOpen());
});
