import assert from "node:assert/strict";
import { test } from "node:test";
import { buildTestApp } from "../helpers/app.js";
import { startUpstream } from "../helpers/http.js";
import { route, setup } from "./support.js";

// The history the agent records of a route: its changes, their callers and the states they captured.

type Change = {
  change_id: number;
  operation: string;
  outcome: string;
  requested_at: string;
  finished_at: string | null;
  request_id: string | null;
  previous_route: { handle: { upstreams: unknown }[] } | null;
  requested_route: { handle: { upstreams: unknown }[] } | null;
  restored_from: number | null;
  error: string | null;
  backup_event_id: string | null;
  change_event_id: string | null;
};

test("history lists create, replace and delete newest first, each with its caller's request id and captured state", async (t) => {
  const { call, up } = await setup(t);
  const other = await startUpstream(t, "other");
  const c = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("h.test", up.port),
    headers: { "x-request-id": "ctl-create-1" },
  });
  assert.equal(c.statusCode, 201, c.body);
  const r = await call({
    method: "PUT",
    url: "/v1/proxy/routes/h.test",
    payload: route("h.test", other.port),
    headers: { "x-request-id": "ctl-replace-2" },
  });
  assert.equal(r.statusCode, 200, r.body);
  // No x-request-id: the agent's own id for the request is recorded.
  assert.equal((await call({ method: "DELETE", url: "/v1/proxy/routes/h.test" })).statusCode, 204);

  const res = await call({ method: "GET", url: "/v1/proxy/routes/h.test/history" });
  assert.equal(res.statusCode, 200, res.body);
  const changes = res.json().changes as Change[];
  assert.deepEqual(
    changes.map((x) => [x.operation, x.outcome]),
    [
      ["delete", "applied"],
      ["replace", "applied"],
      ["create", "applied"],
    ],
  );
  const [del, rep, cre] = changes as [Change, Change, Change];
  assert.ok(del.change_id > rep.change_id && rep.change_id > cre.change_id);
  assert.equal(cre.request_id, "ctl-create-1");
  assert.equal(rep.request_id, "ctl-replace-2");
  assert.equal(typeof del.request_id, "string");
  assert.ok(del.request_id && !del.request_id.startsWith("ctl-"), String(del.request_id));

  const upstreams = (x: Change["previous_route"]) => x?.handle[0]?.upstreams;
  assert.equal(cre.previous_route, null);
  assert.deepEqual(cre.requested_route, c.json());
  assert.deepEqual(rep.previous_route, c.json(), "the replace captured the route the create wrote");
  assert.deepEqual(upstreams(rep.requested_route), [{ dial: `127.0.0.1:${other.port}` }]);
  assert.deepEqual(del.previous_route, r.json(), "the delete captured the replaced route");
  assert.equal(del.requested_route, null);
  for (const x of changes) {
    assert.ok(Date.parse(x.requested_at) <= Date.parse(String(x.finished_at)));
    assert.deepEqual(
      [x.error, x.restored_from, x.backup_event_id, x.change_event_id],
      [null, null, null, null],
      "no error, no restore, no callback",
    );
  }

  const newest = await call({ method: "GET", url: "/v1/proxy/routes/h.test/history?limit=1" });
  assert.deepEqual(
    newest.json().changes.map((x: Change) => x.change_id),
    [del.change_id],
  );
});

test("the request id recorded is the caller's usable x-request-id, else the one the agent generated and answered", async (t) => {
  const { call, up } = await setup(t);
  for (const [domain, given, kept] of [
    ["given-id.test", "caller-1.a", true],
    ["long-id.test", "r".repeat(500), false],
    ["unsafe-id.test", "has space", false],
  ] as const) {
    const created = await call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: route(domain, up.port),
      headers: { "x-request-id": given },
    });
    const answered = created.headers["x-request-id"];
    assert.equal(answered === given, kept, String(answered));
    const [change] = (await call({ method: "GET", url: `/v1/proxy/routes/${domain}/history` })).json()
      .changes;
    assert.equal(change.request_id, answered);
  }
});

test("history of a route the agent never changed is empty; of an id nobody knows, 404", async (t) => {
  const { caddy, call } = await setup(t);
  await caddy.admin.write("POST", "/config/apps/http/servers/srv0/routes", {
    "@id": "outside.test",
    match: [{ host: ["outside.test"] }],
    handle: [{ handler: "static_response" }],
  });
  const empty = await call({ method: "GET", url: "/v1/proxy/routes/outside.test/history" });
  assert.equal(empty.statusCode, 200, empty.body);
  assert.deepEqual(empty.json(), { changes: [] });
  const none = await call({ method: "GET", url: "/v1/proxy/routes/nobody.test/history" });
  assert.equal(none.statusCode, 404, none.body);
  assert.equal(none.json().code, "route_not_found");
});

test("history stays readable while Caddy is down", async (t) => {
  const { caddy, call, up } = await setup(t);
  await call({ method: "POST", url: "/v1/proxy/routes", payload: route("kept.test", up.port) });
  await caddy.stop();
  const res = await call({ method: "GET", url: "/v1/proxy/routes/kept.test/history" });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(res.json().changes.length, 1);
});

for (const query of ["limit=0", "limit=1001", "limit=x", "other=1"])
  test(`history: 400 for ?${query}`, async (t) => {
    const { call } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9" });
    const res = await call({ method: "GET", url: `/v1/proxy/routes/x.test/history?${query}` });
    assert.equal(res.statusCode, 400, res.body);
    assert.equal(res.json().code, "validation_failed");
  });

test("a change cut short by a stop of the agent shows as interrupted to the next agent", async (t) => {
  const { caddy, app, call, up, dataDir } = await setup(t);
  // A write that never comes back stands for the agent stopping in the middle of a change.
  let release = () => {};
  const hung = new Promise<void>((r) => {
    release = r;
  });
  t.after(() => release());
  const admin = app.services.caddyAdmin;
  const write = admin.write.bind(admin);
  t.mock.method(admin, "write", async (...args: Parameters<typeof admin.write>) => {
    await hung;
    return write(...args);
  });
  const pending = call({ method: "POST", url: "/v1/proxy/routes", payload: route("cut.test", up.port) });
  const history = (h: { call: typeof call }) =>
    h
      .call({ method: "GET", url: "/v1/proxy/routes/cut.test/history" })
      // 404 until the change is recorded.
      .then((res) => (res.json().changes ?? []) as Change[]);
  for (const end = Date.now() + 5000; (await history({ call })).length === 0 && Date.now() < end; )
    await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(
    (await history({ call })).map((x: Change) => [x.outcome, x.finished_at]),
    [["pending", null]],
    "under way in this agent",
  );
  const next = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl }, { dataDir });
  assert.deepEqual(
    (await history(next)).map((x: Change) => [x.outcome, x.finished_at]),
    [["interrupted", null]],
    "not under way in the next agent",
  );
  release();
  assert.equal((await pending).statusCode, 201);
});
