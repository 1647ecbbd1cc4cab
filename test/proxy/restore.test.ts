import assert from "node:assert/strict";
import { before, describe, type TestContext, test } from "node:test";
import { buildTestApp, type TestApp } from "../helpers/app.js";
import { startCaddy, type TestCaddy } from "../helpers/caddy.js";
import { startUpstream, viaProxy } from "../helpers/http.js";
import { suiteCleanups } from "../helpers/suite.js";

// Restoring the state a change captured, against a real Caddy, with traffic through its listener.

const OPERATOR = "ops.example.test";

type After = { after: (fn: () => unknown) => void };

async function setup(t: TestContext | After) {
  const caddy = await startCaddy(t);
  const h = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_OPERATOR_DOMAIN: OPERATOR,
  });
  const old = await startUpstream(t, "old");
  const next = await startUpstream(t, "new");
  return { caddy, ...h, old, next, ...helpers(h) };
}

function helpers(h: TestApp) {
  const body = (domain: string, port: number) => ({ domain, upstreams: [{ dial: `127.0.0.1:${port}` }] });
  const ok = async (res: Promise<{ statusCode: number; body: string }>, status: number) => {
    const r = await res;
    assert.equal(r.statusCode, status, r.body);
    return r;
  };
  /** The id of the route's newest change. */
  const lastChange = async (id: string): Promise<number> =>
    (await h.call({ method: "GET", url: `/v1/proxy/routes/${id}/history?limit=1` })).json().changes[0]
      .change_id;
  return {
    create: (domain: string, port: number) =>
      ok(h.call({ method: "POST", url: "/v1/proxy/routes", payload: body(domain, port) }), 201),
    replace: (domain: string, port: number) =>
      ok(h.call({ method: "PUT", url: `/v1/proxy/routes/${domain}`, payload: body(domain, port) }), 200),
    remove: (domain: string) => ok(h.call({ method: "DELETE", url: `/v1/proxy/routes/${domain}` }), 204),
    restore: (domain: string, payload: unknown, headers: Record<string, string> = {}) =>
      h.call({ method: "POST", url: `/v1/proxy/routes/${domain}/restore`, payload, headers }),
    lastChange,
  };
}

test("restoring a delete brings the route back as it was, and traffic flows again", async (t) => {
  const { caddy, call, old, create, remove, restore, lastChange } = await setup(t);
  const created = (await create("back.test", old.port)).body;
  await remove("back.test");
  assert.notEqual((await viaProxy(caddy.httpPort, "back.test")).body, "old");
  const deletion = await lastChange("back.test");

  const res = await restore("back.test", { change_id: deletion }, { "x-request-id": "ctl-restore-1" });
  assert.equal(res.statusCode, 200, res.body);
  const result = res.json();
  assert.equal(result.action, "recreated");
  assert.equal(result.restored_from, deletion);
  assert.ok(result.change_id > deletion);
  assert.deepEqual(result.route, JSON.parse(created));
  assert.equal((await viaProxy(caddy.httpPort, "back.test")).body, "old");
  assert.deepEqual(
    (await call({ method: "GET", url: "/v1/proxy/routes/back.test" })).json(),
    JSON.parse(created),
  );

  const [change] = (await call({ method: "GET", url: "/v1/proxy/routes/back.test/history" })).json().changes;
  assert.deepEqual(
    [change.change_id, change.operation, change.outcome, change.restored_from, change.request_id],
    [result.change_id, "restore", "applied", deletion, "ctl-restore-1"],
  );
  assert.equal(change.previous_route, null, "the restore captured the state it replaced: none");
  assert.deepEqual(change.requested_route, JSON.parse(created));
});

test("restoring a create removes the route", async (t) => {
  const { caddy, call, old, create, restore, lastChange } = await setup(t);
  const created = (await create("gone.test", old.port)).body;
  assert.equal((await viaProxy(caddy.httpPort, "gone.test")).body, "old");
  const creation = await lastChange("gone.test");

  const res = await restore("gone.test", { change_id: creation });
  assert.equal(res.statusCode, 200, res.body);
  const { change_id, ...rest } = res.json() as Record<string, unknown>;
  assert.ok(Number(change_id) > creation);
  assert.deepEqual(rest, { restored_from: creation, action: "removed", route: null });
  assert.equal((await call({ method: "GET", url: "/v1/proxy/routes/gone.test" })).statusCode, 404);
  assert.notEqual((await viaProxy(caddy.httpPort, "gone.test")).body, "old");
  const [change] = (await call({ method: "GET", url: "/v1/proxy/routes/gone.test/history" })).json().changes;
  assert.deepEqual(change.previous_route, JSON.parse(created), "its backup: the route it removed");
  assert.equal(change.requested_route, null);
});

test("restoring a replace puts the old upstream back in service", async (t) => {
  const { caddy, call, old, next, create, replace, restore, lastChange } = await setup(t);
  const created = (await create("swap.test", old.port)).body;
  await replace("swap.test", next.port);
  assert.equal((await viaProxy(caddy.httpPort, "swap.test")).body, "new");
  const replacement = await lastChange("swap.test");

  const res = await restore("swap.test", { change_id: replacement });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(res.json().action, "replaced");
  assert.deepEqual(res.json().route, JSON.parse(created));
  assert.equal((await viaProxy(caddy.httpPort, "swap.test")).body, "old");
  assert.deepEqual(
    (await call({ method: "GET", url: "/v1/proxy/routes/swap.test" })).json(),
    JSON.parse(created),
  );
});

test("a restore is a change of its own, which can be restored in turn", async (t) => {
  const { caddy, old, create, remove, restore, lastChange } = await setup(t);
  await create("twice.test", old.port);
  await remove("twice.test");
  const first = await restore("twice.test", { change_id: await lastChange("twice.test") });
  assert.equal(first.json().action, "recreated");
  // Undoing the restore: it had no previous route, so the route goes again.
  const second = await restore("twice.test", { change_id: first.json().change_id });
  assert.equal(second.statusCode, 200, second.body);
  assert.equal(second.json().action, "removed");
  assert.notEqual((await viaProxy(caddy.httpPort, "twice.test")).body, "old");
  // And undoing that brings it back.
  const third = await restore("twice.test", { change_id: second.json().change_id });
  assert.equal(third.json().action, "recreated");
  assert.equal((await viaProxy(caddy.httpPort, "twice.test")).body, "old");
});

test("a recreated route goes where a create would put it: before a wildcard that covers it", async (t) => {
  const { caddy, call, old, next, create, remove, restore, lastChange } = await setup(t);
  await create("a.shop.test", old.port);
  await remove("a.shop.test");
  const deletion = await lastChange("a.shop.test");
  await create("*.shop.test", next.port);
  assert.equal((await viaProxy(caddy.httpPort, "a.shop.test")).body, "new");
  assert.equal((await restore("a.shop.test", { change_id: deletion })).statusCode, 200);
  const ids = (await call({ method: "GET", url: "/v1/proxy/routes" }))
    .json()
    .map((r: { "@id": string }) => r["@id"]);
  assert.deepEqual(ids, ["a.shop.test", "*.shop.test"]);
  assert.equal((await viaProxy(caddy.httpPort, "a.shop.test")).body, "old");
});

// One agent and Caddy for the refusals: each case leaves Caddy as it found it.
describe("restore refusals: 400, 403, 404, 409", () => {
  const suite = suiteCleanups();
  let s: Awaited<ReturnType<typeof setup>>;
  /** Change ids: the create and delete of gone.test, the replace of kept.test, the create of other.test. */
  const ids = { goneCreate: 0, goneDelete: 0, keptReplace: 0, otherCreate: 0 };
  let caddyBefore = "";
  const caddyConfig = async (caddy: TestCaddy) => (await caddy.admin.read("/config/")).text;
  before(async () => {
    s = await setup(suite);
    await s.create("gone.test", s.old.port);
    ids.goneCreate = await s.lastChange("gone.test");
    await s.remove("gone.test");
    ids.goneDelete = await s.lastChange("gone.test");
    await s.create("kept.test", s.old.port);
    await s.replace("kept.test", s.next.port);
    ids.keptReplace = await s.lastChange("kept.test");
    await s.create("other.test", s.old.port);
    ids.otherCreate = await s.lastChange("other.test");
    caddyBefore = await caddyConfig(s.caddy);
  });

  const refused = async (
    res: Promise<{ statusCode: number; body: string; json: () => Record<string, unknown> }>,
    status: number,
    code: string,
  ) => {
    const r = await res;
    assert.equal(r.statusCode, status, r.body);
    assert.equal(r.json().code, code);
    assert.equal(await caddyConfig(s.caddy), caddyBefore, "Caddy's config is untouched");
    return r.json();
  };

  test("403 for the operator's route", async () => {
    await refused(s.restore(OPERATOR, { change_id: ids.goneCreate }), 403, "operator_route_immutable");
  });

  test("404 route_not_found for a route with no recorded change", async () => {
    await refused(s.restore("never.test", { change_id: ids.goneCreate }), 404, "route_not_found");
  });

  test("404 change_not_found for a change of another route", async () => {
    const b = await refused(s.restore("kept.test", { change_id: ids.otherCreate }), 404, "change_not_found");
    assert.match(String(b.detail), new RegExp(`kept\\.test has no change ${ids.otherCreate}`));
  });

  test("404 change_not_found for a change that does not exist", async () => {
    await refused(s.restore("kept.test", { change_id: 999_999 }), 404, "change_not_found");
  });

  test("409 for removing a route that is gone already (restoring its create after its delete)", async () => {
    const b = await refused(s.restore("gone.test", { change_id: ids.goneCreate }), 409, "restore_conflict");
    assert.match(String(b.detail), /no longer has/);
  });

  test("409 for re-creating a route whose id exists again", async () => {
    await s.create("gone.test", s.next.port);
    const withRoute = await caddyConfig(s.caddy);
    const r = await s.restore("gone.test", { change_id: ids.goneDelete });
    assert.equal(r.statusCode, 409, r.body);
    assert.equal(r.json().code, "restore_conflict");
    assert.match(String(r.json().detail), /in use in Caddy's config again/);
    assert.equal(await caddyConfig(s.caddy), withRoute, "the route that exists again is untouched");
    assert.equal((await viaProxy(s.caddy.httpPort, "gone.test")).body, "new");
    await s.remove("gone.test");
    caddyBefore = await caddyConfig(s.caddy);
  });

  test("409 for re-creating a route whose id another server of Caddy uses", async () => {
    await s.caddy.admin.write("POST", "/config/apps/http/servers/other", {
      listen: ["127.0.0.1:0"],
      routes: [{ "@id": "gone.test", handle: [{ handler: "static_response" }] }],
    });
    caddyBefore = await caddyConfig(s.caddy);
    await refused(s.restore("gone.test", { change_id: ids.goneDelete }), 409, "restore_conflict");
    await s.caddy.admin.write("DELETE", "/config/apps/http/servers/other");
    caddyBefore = await caddyConfig(s.caddy);
  });

  test("409 for replacing a route the managed server no longer has", async () => {
    await s.remove("kept.test");
    caddyBefore = await caddyConfig(s.caddy);
    await refused(s.restore("kept.test", { change_id: ids.keptReplace }), 409, "restore_conflict");
  });

  test("400 for a change_id that is not a positive integer", async () => {
    for (const change_id of [0, -1, 1.5, "1", null])
      await refused(s.restore("kept.test", { change_id }), 400, "validation_failed");
    await refused(s.restore("kept.test", {}), 400, "validation_failed");
  });

  test("400 for a callback_url at a denied address, before anything else is looked at", async () => {
    await refused(
      s.restore("never.test", { change_id: 1, callback_url: "http://169.254.169.254/x" }),
      400,
      "validation_failed",
    );
  });

  test("a refused restore is not recorded", async () => {
    const history = (await s.call({ method: "GET", url: "/v1/proxy/routes/other.test/history" })).json()
      .changes;
    assert.deepEqual(
      history.map((c: { operation: string }) => c.operation),
      ["create"],
    );
    const all = s.app.services.db
      .prepare("SELECT count(*) AS n FROM route_changes WHERE operation = 'restore'")
      .get();
    assert.deepEqual(all, { n: 0 });
  });
});
