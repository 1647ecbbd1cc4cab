import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { buildTestApp, TEST_SECRET } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { startReceiver, startUpstream, verifyStandardWebhook, viaProxy } from "../helpers/http.js";
import { suiteCleanups } from "../helpers/suite.js";

const OPERATOR = "ops.example.test";

async function setup(t: Parameters<typeof startCaddy>[0], env: Record<string, string> = {}) {
  const caddy = await startCaddy(t);
  const h = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_OPERATOR_DOMAIN: OPERATOR,
    ...env,
  });
  return { caddy, ...h };
}

const route = (domain: string, ports: number[], extra: Record<string, unknown> = {}) => ({
  domain,
  upstreams: ports.map((p) => ({ dial: `127.0.0.1:${p}` })),
  ...extra,
});

test("a created route carries traffic to its upstream through Caddy's listener", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await startUpstream(t, "alpha");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("Alpha.Example.TEST.", [up.port]),
  });
  assert.equal(res.statusCode, 201, res.body);
  const created = res.json();
  assert.equal(created["@id"], "alpha.example.test");
  assert.deepEqual(created.match, [{ host: ["alpha.example.test"] }]);
  assert.equal(created.terminal, true);
  assert.deepEqual(created.handle[0].load_balancing, { selection_policy: { policy: "first" } });
  const r = await viaProxy(caddy.httpPort, "alpha.example.test");
  assert.deepEqual(r, { status: 200, body: "alpha" });

  const list = await call({ method: "GET", url: "/v1/proxy/routes" });
  assert.equal(list.statusCode, 200);
  assert.deepEqual(
    list.json().map((x: { "@id": string }) => x["@id"]),
    ["alpha.example.test"],
  );
});

test("an internationalised domain becomes a lowercase punycode id and host", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await startUpstream(t, "idn");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("App.Bücher.example.", [up.port]),
  });
  assert.equal(res.statusCode, 201, res.body);
  assert.equal(res.json()["@id"], "app.xn--bcher-kva.example");
  assert.equal((await viaProxy(caddy.httpPort, "app.xn--bcher-kva.example")).body, "idn");
});

test("strategy first sends everything to the first upstream; weighted_round_robin 3:1 gives 3:1 traffic", async (t) => {
  const { caddy, call } = await setup(t);
  const a = await startUpstream(t, "a");
  const b = await startUpstream(t, "b");
  let res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("first.test", [a.port, b.port], { strategy: "first" }),
  });
  assert.equal(res.statusCode, 201, res.body);
  for (let i = 0; i < 20; i++) assert.equal((await viaProxy(caddy.httpPort, "first.test")).body, "a");

  res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: {
      domain: "wrr.test",
      strategy: "weighted_round_robin",
      upstreams: [
        { dial: `127.0.0.1:${a.port}`, weight: 3 },
        { dial: `127.0.0.1:${b.port}`, weight: 1 },
      ],
    },
  });
  assert.equal(res.statusCode, 201, res.body);
  assert.deepEqual(res.json().handle[0].load_balancing.selection_policy, {
    policy: "weighted_round_robin",
    weights: [3, 1],
  });
  const counts = { a: 0, b: 0 } as Record<string, number>;
  for (let i = 0; i < 80; i++) {
    const r = await viaProxy(caddy.httpPort, "wrr.test");
    counts[r.body] = (counts[r.body] ?? 0) + 1;
  }
  assert.equal(counts.a, 60, JSON.stringify(counts));
  assert.equal(counts.b, 20, JSON.stringify(counts));
});

test("replace switches traffic, delete stops it", async (t) => {
  const { caddy, call } = await setup(t);
  const a = await startUpstream(t, "old");
  const b = await startUpstream(t, "new");
  assert.equal(
    (await call({ method: "POST", url: "/v1/proxy/routes", payload: route("swap.test", [a.port]) }))
      .statusCode,
    201,
  );
  assert.equal((await viaProxy(caddy.httpPort, "swap.test")).body, "old");
  const put = await call({
    method: "PUT",
    url: "/v1/proxy/routes/swap.test",
    payload: route("swap.test", [b.port], { terminal: false }),
  });
  assert.equal(put.statusCode, 200, put.body);
  assert.equal(put.json().terminal, false);
  assert.equal((await viaProxy(caddy.httpPort, "swap.test")).body, "new");
  const del = await call({ method: "DELETE", url: "/v1/proxy/routes/swap.test" });
  assert.equal(del.statusCode, 204, del.body);
  assert.equal(del.body, "");
  const after = await viaProxy(caddy.httpPort, "swap.test");
  assert.notEqual(after.body, "new");
  assert.equal(b.hits(), 1);
  assert.equal((await call({ method: "GET", url: "/v1/proxy/routes" })).json().length, 0);
});

test("a new host route goes before catch-all and covering wildcard routes that were already there", async (t) => {
  const { caddy, call } = await setup(t);
  const fallback = await startUpstream(t, "fallback");
  const wild = await startUpstream(t, "wild");
  const exact = await startUpstream(t, "exact");
  // A catch-all route made outside the agent.
  await caddy.admin.write("POST", "/config/apps/http/servers/srv0/routes", {
    handle: [{ handler: "reverse_proxy", upstreams: [{ dial: `127.0.0.1:${fallback.port}` }] }],
  });
  assert.equal(
    (await call({ method: "POST", url: "/v1/proxy/routes", payload: route("*.shop.test", [wild.port]) }))
      .statusCode,
    201,
  );
  assert.equal(
    (await call({ method: "POST", url: "/v1/proxy/routes", payload: route("a.shop.test", [exact.port]) }))
      .statusCode,
    201,
  );
  const ids = (await call({ method: "GET", url: "/v1/proxy/routes" }))
    .json()
    .map((r: { "@id"?: string }) => r["@id"] ?? null);
  assert.deepEqual(ids, ["a.shop.test", "*.shop.test", null]);
  assert.equal((await viaProxy(caddy.httpPort, "a.shop.test")).body, "exact");
  assert.equal((await viaProxy(caddy.httpPort, "b.shop.test")).body, "wild");
  assert.equal((await viaProxy(caddy.httpPort, "other.test")).body, "fallback");
});

test("route_backup reaches the callback signed, with the previous state, before the change", async (t) => {
  const { call } = await setup(t);
  const up = await startUpstream(t, "u");
  const up2 = await startUpstream(t, "u2");
  const rx = await startReceiver(t);
  const create = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("cb.test", [up.port], { callback_url: rx.url }),
  });
  assert.equal(create.statusCode, 201);
  const put = await call({
    method: "PUT",
    url: "/v1/proxy/routes/cb.test",
    payload: route("cb.test", [up2.port], { callback_url: rx.url }),
  });
  assert.equal(put.statusCode, 200);
  const del = await call({
    method: "DELETE",
    url: "/v1/proxy/routes/cb.test",
    payload: { callback_url: rx.url },
  });
  assert.equal(del.statusCode, 204);
  // Each answer waits for its change's first attempts (its route_backup's, then its route_change's), so
  // all six are here already, each change's backup before its outcome.
  assert.deepEqual(
    rx.received.map((w) => w.json.type),
    ["route_backup", "route_change", "route_backup", "route_change", "route_backup", "route_change"],
  );
  const backups = rx.received.filter((w) => w.json.type === "route_backup");
  for (const w of backups) {
    assert.ok(verifyStandardWebhook(TEST_SECRET, w), "signature verifies");
    assert.match(String(w.headers["webhook-id"]), /^msg_/);
    assert.ok(Math.abs(Number(w.headers["webhook-timestamp"]) - Date.now() / 1000) < 60);
    assert.equal(w.json.type, "route_backup");
    assert.equal(w.json.data.route_id, "cb.test");
  }
  const upstreamsOf = (prev: unknown) => (prev as { handle: { upstreams: unknown }[] }).handle[0]?.upstreams;
  const [c, r, d] = backups.map((w) => w.json.data) as Record<string, unknown>[];
  assert.ok(c && r && d);
  assert.equal(c.operation, "create");
  assert.equal(c.previous_route, null);
  assert.equal(r.operation, "replace");
  assert.deepEqual(upstreamsOf(r.previous_route), [{ dial: `127.0.0.1:${up.port}` }]);
  assert.equal(d.operation, "delete");
  assert.deepEqual(upstreamsOf(d.previous_route), [{ dial: `127.0.0.1:${up2.port}` }]);
});

test("a receiver that is down does not block the change and gets the event later", async (t) => {
  const { call, app } = await setup(t, { HOSTKEEPER_WEBHOOK_RETRY_SCHEDULE: "1,1,1" });
  const up = await startUpstream(t, "u");
  const rx = await startReceiver(t, { status: (n) => (n === 0 ? 503 : 200) });
  const started = Date.now();
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("late.test", [up.port], { callback_url: rx.url }),
  });
  assert.equal(res.statusCode, 201);
  assert.equal(rx.received.length, 0, "the first attempt got 503");
  await rx.waitFor(1, 10_000);
  assert.ok(Date.now() - started >= 700, "delivered by a retry, not the first attempt");
  assert.ok(verifyStandardWebhook(TEST_SECRET, rx.received[0] as never));
  // The receiver has the event before its answer reaches the agent, which records the attempt after that.
  const row = app.services.db.prepare("SELECT state, attempts FROM outbox_events WHERE id = ?");
  const id = rx.received[0]?.headers["webhook-id"];
  let ev = row.get(id) as { state: string; attempts: number };
  for (
    const end = Date.now() + 5000;
    ev.state === "pending" && Date.now() < end;
    ev = row.get(id) as typeof ev
  )
    await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(ev, { state: "delivered", attempts: 2 });
});

test("a receiver holding its answer delays no change, only the answer of the request that named it", async (t) => {
  // The longest first attempt allowed: were the writer to wait for it, the other change would wait as long.
  const { caddy, call, app } = await setup(t, { HOSTKEEPER_WEBHOOK_FIRST_ATTEMPT_TIMEOUT_MS: "30000" });
  const up = await startUpstream(t, "u");
  let release = () => {};
  const held = new Promise<void>((r) => {
    release = r;
  });
  t.after(() => release());
  const rx = await startReceiver(t, { hold: () => held });
  const order: string[] = [];
  // Spies, not stand-ins: they note when the first attempt starts and how many writes reached Caddy by then.
  let writes = 0;
  const admin = app.services.caddyAdmin;
  const write = admin.write.bind(admin);
  t.mock.method(admin, "write", async (...args: Parameters<typeof admin.write>) => {
    writes++;
    return write(...args);
  });
  const outbox = app.services.outbox;
  const deliverNow = outbox.deliverNow.bind(outbox);
  t.mock.method(outbox, "deliverNow", (...args: Parameters<typeof outbox.deliverNow>) => {
    order.push(`${outbox.get(args[0])?.type} first attempt starts after ${writes} Caddy writes`);
    return deliverNow(...args);
  });

  const slow = call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("slow.test", [up.port], { callback_url: rx.url }),
  }).then((res) => {
    order.push("slow.test answered");
    return res;
  });
  await rx.waitFor(1, 10_000);
  order.push("the receiver holds the event");
  const other = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("other.test", [up.port]),
  });
  order.push("other.test answered");
  assert.equal(other.statusCode, 201, other.body);
  // Both changes are in Caddy while the receiver still holds its answer.
  assert.equal((await viaProxy(caddy.httpPort, "slow.test")).body, "u");
  assert.equal((await viaProxy(caddy.httpPort, "other.test")).body, "u");

  release();
  assert.equal((await slow).statusCode, 201);
  // The route_change's attempt waits for the backup's (same route, same receiver), and the answer for both.
  assert.deepEqual(order, [
    "route_backup first attempt starts after 0 Caddy writes",
    "the receiver holds the event",
    "other.test answered",
    "route_change first attempt starts after 2 Caddy writes",
    "slow.test answered",
  ]);
  // The held attempt is the one that delivered the backup, recorded before its request was answered.
  const ev = app.services.db.prepare("SELECT type, state, attempts FROM outbox_events ORDER BY rowid").all();
  assert.deepEqual(ev, [
    { type: "route_backup", state: "delivered", attempts: 1 },
    { type: "route_change", state: "delivered", attempts: 1 },
  ]);
});

type InjectedResponse = {
  statusCode: number;
  headers: Record<string, unknown>;
  body: string;
  json: () => Record<string, unknown>;
};

/** Asserts an RFC 9457 problem with this status and code, and no stack or path in it; returns its body. */
function problem(res: InjectedResponse, status: number, code: string) {
  assert.equal(res.statusCode, status, res.body);
  assert.match(String(res.headers["content-type"]), /^application\/problem\+json/);
  const b = res.json();
  assert.equal(b.status, status);
  assert.equal(b.code, code);
  assert.equal(b.type, `urn:hostkeeper:problem:${code}`);
  assert.equal(typeof b.title, "string");
  assert.equal(typeof b.detail, "string");
  assert.doesNotMatch(JSON.stringify(b), /at .*\.js:\d+|\/work\/|node_modules/);
  return b;
}

const fieldsOf = (b: Record<string, unknown>) => (b.errors as { field: string }[]).map((e) => e.field);

// One agent and Caddy for all the cases (each only asks; none changes a route), so that each case is a
// test of its own and fails for its own reason.
describe("problems: 401, 400 (naming fields), 403, 404, 409, 413, 415", () => {
  const suite = suiteCleanups();
  let h: Awaited<ReturnType<typeof setup>>;
  let upPort: number;
  const call = (opts: Parameters<typeof h.call>[0]) => h.call(opts);
  before(async () => {
    h = await setup(suite, { HOSTKEEPER_BODY_LIMIT: "1024" });
    upPort = (await startUpstream(suite, "u")).port;
    // An existing route, for the cases about one.
    const dup = await call({ method: "POST", url: "/v1/proxy/routes", payload: route("dup.test", [upPort]) });
    assert.equal(dup.statusCode, 201, dup.body);
  });

  test("401 without a token", async () => {
    problem(await h.app.inject({ method: "GET", url: "/v1/proxy/routes" }), 401, "unauthorized");
  });

  test("401 with a wrong token", async () => {
    problem(
      await h.app.inject({
        method: "GET",
        url: "/v1/proxy/routes",
        headers: { authorization: "Bearer wrong-token-wrong-token" },
      }),
      401,
      "unauthorized",
    );
  });

  test("400 names an unknown field, and only it", async () => {
    const b = problem(
      await call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: { domain: "x.test", upstreams: [{ dial: "nonsense" }], extra: 1 },
      }),
      400,
      "validation_failed",
    );
    assert.deepEqual(fieldsOf(b), ["body.extra"]);
  });

  test("400 names a missing domain, empty upstreams and an unknown strategy together", async () => {
    const b = problem(
      await call({ method: "POST", url: "/v1/proxy/routes", payload: { upstreams: [], strategy: "random" } }),
      400,
      "validation_failed",
    );
    const fields = fieldsOf(b).sort();
    assert.ok(
      fields.includes("body.domain") && fields.includes("body.upstreams") && fields.includes("body.strategy"),
      fields.join(),
    );
  });

  test("400 names each bad upstream dial and weight by its index", async () => {
    const b = problem(
      await call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: { domain: "x.test", upstreams: [{ dial: "127.0.0.1:0" }, { dial: "host", weight: 2 }] },
      }),
      400,
      "validation_failed",
    );
    assert.deepEqual(fieldsOf(b), [
      "body.upstreams[0].dial",
      "body.upstreams[1].dial",
      "body.upstreams[1].weight",
    ]);
  });

  test("400 for weighted_round_robin weights that sum to 0", async () => {
    const b = problem(
      await call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: {
          domain: "x.test",
          strategy: "weighted_round_robin",
          upstreams: [{ dial: "127.0.0.1:1", weight: 0 }],
        },
      }),
      400,
      "validation_failed",
    );
    assert.match(String(b.detail), /sum to more than 0/);
  });

  test("400 for a callback_url that is not http(s)", async () => {
    problem(
      await call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: route("x.test", [upPort], { callback_url: "ftp://x" }),
      }),
      400,
      "validation_failed",
    );
  });

  test("400 for a callback_url at a denied address (cloud metadata)", async () => {
    problem(
      await call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: route("x.test", [upPort], { callback_url: "http://169.254.169.254/latest" }),
      }),
      400,
      "validation_failed",
    );
  });

  test("400 malformed_body for JSON that does not parse", async () => {
    problem(
      await call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: "{not json",
        headers: { "content-type": "application/json" },
      }),
      400,
      "malformed_body",
    );
  });

  test("415 for a body that is not JSON", async () => {
    problem(
      await call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: "domain=x",
        headers: { "content-type": "text/plain" },
      }),
      415,
      "unsupported_media_type",
    );
  });

  test("413 for a body over the limit", async () => {
    problem(
      await call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: route(`${"a".repeat(60)}.test`, Array(64).fill(upPort)),
      }),
      413,
      "payload_too_large",
    );
  });

  test("409 for a domain that derives to an existing route's id", async () => {
    problem(
      await call({ method: "POST", url: "/v1/proxy/routes", payload: route("DUP.test.", [upPort]) }),
      409,
      "route_exists",
    );
  });

  test("409 for a create of the operator's domain", async () => {
    problem(
      await call({ method: "POST", url: "/v1/proxy/routes", payload: route(OPERATOR, [upPort]) }),
      409,
      "route_exists",
    );
  });

  test("403 for a replace of the operator's route", async () => {
    problem(
      await call({ method: "PUT", url: `/v1/proxy/routes/${OPERATOR}`, payload: route(OPERATOR, [upPort]) }),
      403,
      "operator_route_immutable",
    );
  });

  test("403 for a delete of the operator's route", async () => {
    problem(
      await call({ method: "DELETE", url: `/v1/proxy/routes/${OPERATOR}` }),
      403,
      "operator_route_immutable",
    );
  });

  test("404 for a replace of a route that does not exist", async () => {
    problem(
      await call({ method: "PUT", url: "/v1/proxy/routes/nope.test", payload: route("nope.test", [upPort]) }),
      404,
      "route_not_found",
    );
  });

  test("404 for a delete of a route that does not exist", async () => {
    problem(await call({ method: "DELETE", url: "/v1/proxy/routes/nope.test" }), 404, "route_not_found");
  });

  test("400 for a replace whose domain derives to another id, naming it", async () => {
    const b = problem(
      await call({ method: "PUT", url: "/v1/proxy/routes/dup.test", payload: route("other.test", [upPort]) }),
      400,
      "validation_failed",
    );
    assert.match(String(b.detail), /other\.test/);
  });

  test("404 not_found for a path that is no route of the API", async () => {
    problem(await call({ method: "GET", url: "/v1/nothing-here" }), 404, "not_found");
  });
});

test("an id used elsewhere in Caddy's config is a conflict", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await startUpstream(t, "u");
  await caddy.admin.write("POST", "/config/apps/http/servers/other", {
    listen: ["127.0.0.1:0"],
    routes: [{ "@id": "taken.test", handle: [{ handler: "static_response", body: "x" }] }],
  });
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("taken.test", [up.port]),
  });
  assert.equal(res.statusCode, 409, res.body);
});

test("503 while Caddy is down on all four operations, and recovery once it is back", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await startUpstream(t, "u");
  assert.equal(
    (await call({ method: "POST", url: "/v1/proxy/routes", payload: route("keep.test", [up.port]) }))
      .statusCode,
    201,
  );
  await caddy.stop();
  for (const [method, url, payload] of [
    ["GET", "/v1/proxy/routes", undefined],
    ["POST", "/v1/proxy/routes", route("new.test", [up.port])],
    ["PUT", "/v1/proxy/routes/keep.test", route("keep.test", [up.port])],
    ["DELETE", "/v1/proxy/routes/keep.test", undefined],
  ] as const) {
    const res = await call({ method, url, payload });
    assert.equal(res.statusCode, 503, `${method} ${res.body}`);
    assert.equal(res.json().code, "proxy_unavailable");
  }
  assert.equal((await call({ method: "GET", url: "/healthz" })).statusCode, 200);
  await caddy.start();
  // The restarted Caddy loaded its start config (routes made through the API were not persisted in tests).
  const res = await call({ method: "POST", url: "/v1/proxy/routes", payload: route("new.test", [up.port]) });
  assert.equal(res.statusCode, 201, res.body);
  assert.equal((await viaProxy(caddy.httpPort, "new.test")).body, "u");
});

test("50 concurrent creates of distinct domains all succeed and each appears once", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await startUpstream(t, "u");
  const results = await Promise.all(
    Array.from({ length: 50 }, (_, i) =>
      call({ method: "POST", url: "/v1/proxy/routes", payload: route(`c${i}.bulk.test`, [up.port]) }),
    ),
  );
  assert.deepEqual(
    results.map((r) => r.statusCode),
    Array(50).fill(201),
  );
  const res = await caddy.admin.read("/config/apps/http/servers/srv0/routes");
  const ids = (JSON.parse(res.text) as { "@id": string }[]).map((r) => r["@id"]).sort();
  assert.deepEqual(ids, Array.from({ length: 50 }, (_, i) => `c${i}.bulk.test`).sort());
  assert.equal((await viaProxy(caddy.httpPort, "c49.bulk.test")).body, "u");
});

test("on a Caddy with an empty config the first create makes the managed server", async (t) => {
  const caddy = await startCaddy(t, { withServer: false });
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_SERVER: "edge",
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${caddy.httpPort}`,
  });
  const up = await startUpstream(t, "u");
  assert.deepEqual((await call({ method: "GET", url: "/v1/proxy/routes" })).json(), []);
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("first.test", [up.port]),
  });
  assert.equal(res.statusCode, 201, res.body);
  const server = JSON.parse((await caddy.admin.read("/config/apps/http/servers/edge")).text);
  assert.deepEqual(server.listen, [`127.0.0.1:${caddy.httpPort}`]);
  assert.equal(server.routes[0]["@id"], "first.test");
  // The admin endpoint stayed where it was.
  assert.equal(
    (await caddy.admin.read("/config/admin/listen")).text.trim(),
    JSON.stringify(new URL(caddy.adminUrl).host),
  );
});

test("the OpenAPI document describes every proxy operation with its bodies and problems", async (t) => {
  const { call } = await setup(t);
  const res = await call({ method: "GET", url: "/v1/openapi.json" });
  assert.equal(res.statusCode, 200);
  const doc = res.json();
  assert.equal(doc.openapi, "3.1.0");
  const routes = doc.paths["/v1/proxy/routes"];
  const one = doc.paths["/v1/proxy/routes/{route_id}"];
  assert.ok(routes.get.responses["200"] && routes.get.responses["503"]);
  assert.ok(
    routes.post.requestBody &&
      routes.post.responses["201"] &&
      routes.post.responses["409"] &&
      routes.post.responses["400"],
  );
  for (const s of ["200", "400", "401", "403", "404", "503"]) assert.ok(one.put.responses[s], `PUT ${s}`);
  for (const s of ["204", "403", "404", "503"]) assert.ok(one.delete.responses[s], `DELETE ${s}`);
  assert.ok(
    doc.components.schemas.Problem && doc.components.schemas.Route && doc.components.schemas.Upstream,
  );
  assert.ok(doc.components.securitySchemes.bearer);
});

test("a change made to Caddy behind the agent's back is picked up (If-Match 412, re-read, re-apply)", async (t) => {
  const { caddy, call, app } = await setup(t);
  const up = await startUpstream(t, "u");
  assert.equal(
    (await call({ method: "POST", url: "/v1/proxy/routes", payload: route("one.test", [up.port]) }))
      .statusCode,
    201,
  );
  // The writer reads the routes' new ETag after answering; the outside write must come after that read.
  await app.services.writer.whenIdle();
  const statuses: number[] = [];
  const admin = app.services.caddyAdmin;
  const realRaw = admin.raw.bind(admin);
  let outside: Promise<void> | undefined;
  t.mock.method(admin, "raw", async (...args: Parameters<typeof admin.raw>) => {
    // Another writer's change lands just before the agent's first write: whether the agent read the routes
    // for this change or knew them from the last one, its If-Match names routes Caddy no longer holds.
    if (args[0] !== "GET") {
      outside ??= caddy.admin.write("POST", "/config/apps/http/servers/srv0/routes", {
        "@id": "outside.test",
        match: [{ host: ["outside.test"] }],
        handle: [{ handler: "static_response", body: "outside" }],
      });
      await outside;
    }
    const res = await realRaw(...args);
    if (args[0] !== "GET") statuses.push(res.status);
    return res;
  });
  assert.equal(
    (await call({ method: "POST", url: "/v1/proxy/routes", payload: route("two.test", [up.port]) }))
      .statusCode,
    201,
  );
  assert.deepEqual(statuses, [412, 200], "the stale write was refused, the re-applied one landed");
  const ids = (await call({ method: "GET", url: "/v1/proxy/routes" }))
    .json()
    .map((r: { "@id": string }) => r["@id"]);
  assert.deepEqual(ids, ["one.test", "outside.test", "two.test"]);
  assert.equal((await viaProxy(caddy.httpPort, "outside.test")).body, "outside");
});

test("404 and 409 are decided on Caddy's current routes, not on what the agent saw last", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await startUpstream(t, "u");
  assert.equal(
    (await call({ method: "POST", url: "/v1/proxy/routes", payload: route("gone.test", [up.port]) }))
      .statusCode,
    201,
  );
  // Removed and added behind the agent's back.
  await caddy.admin.write("DELETE", "/id/gone.test");
  await caddy.admin.write("POST", "/config/apps/http/servers/srv0/routes", {
    "@id": "came.test",
    match: [{ host: ["came.test"] }],
    handle: [{ handler: "static_response" }],
  });
  assert.equal(
    (await call({ method: "POST", url: "/v1/proxy/routes", payload: route("gone.test", [up.port]) }))
      .statusCode,
    201,
  );
  assert.equal(
    (await call({ method: "PUT", url: "/v1/proxy/routes/came.test", payload: route("came.test", [up.port]) }))
      .statusCode,
    200,
  );
  assert.equal((await viaProxy(caddy.httpPort, "came.test")).body, "u");
});
