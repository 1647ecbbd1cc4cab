import assert from "node:assert/strict";
import { test } from "node:test";
import { route, setup } from "./support.js";

// One route as Caddy holds it, and the Location of a create that points there.

test("GET one route answers it as Caddy holds it; a create's Location points there", async (t) => {
  const { caddy, call, up } = await setup(t);
  const created = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("One.test.", up.port),
  });
  assert.equal(created.statusCode, 201, created.body);
  assert.equal(created.headers.location, "/v1/proxy/routes/one.test");
  const got = await call({ method: "GET", url: String(created.headers.location) });
  assert.equal(got.statusCode, 200, got.body);
  assert.deepEqual(got.json(), created.json());
  assert.deepEqual(got.json(), JSON.parse((await caddy.admin.read("/id/one.test")).text));

  const wild = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("*.wild.test", up.port),
  });
  assert.equal(wild.headers.location, "/v1/proxy/routes/*.wild.test");
  assert.equal(
    (await call({ method: "GET", url: String(wild.headers.location) })).json()["@id"],
    "*.wild.test",
  );
});

test("GET one route answers a route the agent did not make, with all of it", async (t) => {
  const { caddy, call } = await setup(t);
  const outside = {
    "@id": "outside.test",
    match: [{ host: ["outside.test"], path: ["/x/*"] }],
    handle: [{ handler: "static_response", body: "outside", status_code: 202 }],
  };
  await caddy.admin.write("POST", "/config/apps/http/servers/srv0/routes", outside);
  const got = await call({ method: "GET", url: "/v1/proxy/routes/outside.test" });
  assert.equal(got.statusCode, 200, got.body);
  assert.deepEqual(got.json(), outside);
});

test("GET one route is 404 for an id the managed server does not hold, even when Caddy has it elsewhere", async (t) => {
  const { caddy, call } = await setup(t);
  await caddy.admin.write("POST", "/config/apps/http/servers/other", {
    listen: ["127.0.0.1:0"],
    routes: [{ "@id": "elsewhere.test", handle: [{ handler: "static_response" }] }],
  });
  for (const id of ["nope.test", "elsewhere.test"]) {
    const res = await call({ method: "GET", url: `/v1/proxy/routes/${id}` });
    assert.equal(res.statusCode, 404, res.body);
    assert.equal(res.json().code, "route_not_found");
  }
});

test("GET one route is 503 while Caddy is down", async (t) => {
  const { caddy, call, up } = await setup(t);
  assert.equal(
    (await call({ method: "POST", url: "/v1/proxy/routes", payload: route("down.test", up.port) }))
      .statusCode,
    201,
  );
  await caddy.stop();
  const res = await call({ method: "GET", url: "/v1/proxy/routes/down.test" });
  assert.equal(res.statusCode, 503, res.body);
  assert.equal(res.json().code, "proxy_unavailable");
});
