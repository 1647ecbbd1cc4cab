import assert from "node:assert/strict";
import { test } from "node:test";
import type { RouteJson } from "../../src/caddy/routes/plan.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { route, setup } from "./support.js";

// GET /v1/proxy/routes passes Caddy's bytes through: the answer is exactly what Caddy holds at the
// managed server's routes path, whatever routes are there, without the agent parsing it.

const ROUTES = "/config/apps/http/servers/srv0/routes";

test("the list is Caddy's own bytes, byte for byte, with routes the agent did not make and the operator's", async (t) => {
  const caddy = await startCaddy(t);
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_OPERATOR_DOMAIN: "ops.list.test",
  });
  const up = await import("../helpers/http.js").then((m) => m.startUpstream(t, "u"));
  // Characters Caddy escapes its own way (<, >, & as \u003c...; non-ASCII as is), numbers, nesting.
  const outside = {
    "@id": "outside.list.test",
    match: [{ host: ["outside.list.test"], path: ["/a&b/<c>/ü/*"] }],
    handle: [{ handler: "static_response", body: '<b>"x" & ü ☃</b>', status_code: 202 }],
  };
  await caddy.admin.write("POST", ROUTES, outside);
  // The operator's route as the agent writes it: its upstream read from a file per request.
  await caddy.admin.write("POST", ROUTES, {
    "@id": "ops.list.test",
    match: [{ host: ["ops.list.test"] }],
    handle: [{ handler: "reverse_proxy", upstreams: [{ dial: "{file./run/hk/operator-upstream}" }] }],
    terminal: true,
  });
  const created = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("a.list.test", up.port),
  });
  assert.equal(created.statusCode, 201, created.body);
  await caddy.admin.write("POST", ROUTES, { handle: [{ handler: "static_response", body: "catch-all" }] });

  const res = await call({ method: "GET", url: "/v1/proxy/routes" });
  assert.equal(res.statusCode, 200, res.body);
  assert.match(String(res.headers["content-type"]), /^application\/json/);
  const caddyText = (await caddy.admin.read(ROUTES)).text;
  assert.equal(res.body, caddyText);
  assert.ok(res.body.includes("\\u003cb\\u003e"), "Caddy's escaping is kept");
  const ids = (res.json() as RouteJson[]).map((r) => r["@id"]);
  assert.ok(
    ["outside.list.test", "a.list.test", "ops.list.test"].every((id) => ids.includes(id)),
    ids.join(),
  );

  // One route: the position the writer knows, Caddy's id index, or all routes: the same route each way.
  for (const id of ["outside.list.test", "a.list.test", "ops.list.test"]) {
    const one = await call({ method: "GET", url: `/v1/proxy/routes/${id}` });
    assert.equal(one.statusCode, 200, one.body);
    assert.deepEqual(
      one.json(),
      (res.json() as RouteJson[]).find((r) => r["@id"] === id),
    );
  }
});

test("the list is [] when the server has no routes key or does not exist, and 503 when Caddy is down", async (t) => {
  const { caddy, call } = await setup(t);
  await caddy.admin.write("DELETE", ROUTES);
  assert.equal((await caddy.admin.read(ROUTES)).text.trim(), "null");
  let res = await call({ method: "GET", url: "/v1/proxy/routes" });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(res.body, "[]");
  await caddy.admin.write("DELETE", "/config/apps/http/servers/srv0");
  res = await call({ method: "GET", url: "/v1/proxy/routes" });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(res.body, "[]");
  await caddy.stop();
  res = await call({ method: "GET", url: "/v1/proxy/routes" });
  assert.equal(res.statusCode, 503, res.body);
  assert.equal(res.json().code, "proxy_unavailable");
});

test("one route moved behind the agent's back is still found, and one removed is 404", async (t) => {
  const { caddy, call, up } = await setup(t);
  for (const d of ["m1.list.test", "m2.list.test", "m3.list.test"])
    assert.equal(
      (await call({ method: "POST", url: "/v1/proxy/routes", payload: route(d, up.port) })).statusCode,
      201,
    );
  // The writer knows m3 at position 2; put another route before it and take m2 out, behind its back.
  await caddy.admin.write("PUT", `${ROUTES}/0`, {
    "@id": "first.list.test",
    handle: [{ handler: "static_response" }],
  });
  await caddy.admin.write("DELETE", "/id/m2.list.test");
  const m3 = await call({ method: "GET", url: "/v1/proxy/routes/m3.list.test" });
  assert.equal(m3.statusCode, 200, m3.body);
  assert.equal(m3.json()["@id"], "m3.list.test");
  assert.equal((await call({ method: "GET", url: "/v1/proxy/routes/m2.list.test" })).statusCode, 404);
  // An id with a slash cannot go to Caddy's id index (it would name a path inside another object).
  assert.equal(
    (await call({ method: "GET", url: `/v1/proxy/routes/${encodeURIComponent("m3.list.test/match")}` }))
      .statusCode,
    404,
  );
});

test("concurrent reads of routes made behind the agent's back share one read of all routes and each get its own", async (t) => {
  const { caddy, call, up } = await setup(t);
  const outside = Array.from({ length: 30 }, (_, i) => ({
    "@id": `o${i}.list.test`,
    match: [{ host: [`o${i}.list.test`] }],
    handle: [{ handler: "static_response", body: `o${i}` }],
  }));
  await caddy.admin.write("PATCH", ROUTES, outside);
  const answers = await Promise.all(
    outside.map((r) => call({ method: "GET", url: `/v1/proxy/routes/${r["@id"]}` })),
  );
  answers.forEach((a, i) => {
    assert.equal(a.statusCode, 200, a.body);
    assert.deepEqual(a.json(), outside[i]);
  });
  // A route the agent creates while such reads run is found by a read asked for after its answer.
  const slow = Promise.all(outside.map((r) => call({ method: "GET", url: `/v1/proxy/routes/${r["@id"]}` })));
  const created = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("new.list.test", up.port),
  });
  assert.equal(created.statusCode, 201, created.body);
  const got = await call({ method: "GET", url: "/v1/proxy/routes/new.list.test" });
  assert.equal(got.statusCode, 200, got.body);
  await slow;
});

test("a list too large for Caddy to size streams through byte for byte", async (t) => {
  const { caddy, call } = await setup(t);
  const many = Array.from({ length: 1000 }, (_, i) => ({
    "@id": `big${i}.list.test`,
    match: [{ host: [`big${i}.list.test`] }],
    handle: [{ handler: "static_response", body: `<${i}> & ü` }],
  }));
  await caddy.admin.write("PATCH", ROUTES, many);
  const res = await call({ method: "GET", url: "/v1/proxy/routes" });
  assert.equal(res.statusCode, 200);
  assert.equal(res.headers["transfer-encoding"], "chunked", "streamed, not sized");
  assert.ok(res.body.length > 64 * 1024);
  assert.equal(res.body, (await caddy.admin.read(ROUTES)).text);
});
