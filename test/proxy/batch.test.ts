import assert from "node:assert/strict";
import { test } from "node:test";
import { CaddyApiError } from "../../src/caddy/admin.js";
import { proxyProblem } from "../../src/proxy/problems.js";
import { canonicalJson } from "../../src/util/canonical-json.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy, type TestCaddy } from "../helpers/caddy.js";
import { startReceiver, startUpstream } from "../helpers/http.js";

type Call = () => Promise<unknown>;
const route = (domain: string, port: number, callback_url?: string) => ({
  domain,
  upstreams: [{ dial: `127.0.0.1:${port}` }],
  ...(callback_url ? { callback_url } : {}),
});

/** Runs calls that reach the writer in this order, returning each one's status (or problem code). */
async function outcomes(calls: Call[]): Promise<(string | number)[]> {
  const settled = await Promise.allSettled(calls.map((c) => c()));
  return settled.map((s) =>
    s.status === "fulfilled" ? "ok" : (proxyProblem(s.reason)?.code ?? String(s.reason)),
  );
}

async function setup(t: import("node:test").TestContext, gatherMaxMs = "0") {
  const caddy = await startCaddy(t);
  // Most tests here are about changes that wait behind a write under way: a change that finds the writer
  // idle goes at once unless the test asks for the gather window, which may hold it for others.
  const h = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_ROUTE_GATHER_MAX_MS: gatherMaxMs,
  });
  const admin = h.app.services.caddyAdmin;
  const realWrite = admin.write.bind(admin);
  const writes: string[] = [];
  // A spy, not a stand-in: every write still goes to Caddy; it only counts them.
  t.mock.method(admin, "write", async (...args: Parameters<typeof admin.write>) => {
    writes.push(`${args[0]} ${args[1]}`);
    return realWrite(...args);
  });
  const routesOf = async () =>
    JSON.parse((await caddy.admin.read("/config/apps/http/servers/srv0/routes")).text) as unknown[];
  return { caddy, ...h, writes, routesOf, svc: h.app.services.routes };
}

/**
 * Puts enough routes in Caddy that a write takes tens of milliseconds, which opens the gather window (a
 * share of the last write); returns them.
 */
async function loadMany(caddy: TestCaddy) {
  const load = Array.from({ length: 3000 }, (_, i) => ({
    "@id": `load${i}.test`,
    match: [{ host: [`load${i}.test`] }],
    handle: [{ handler: "static_response", status_code: 200 }],
  }));
  const loaded = await caddy.admin.raw("PATCH", "/config/apps/http/servers/srv0/routes", {
    body: JSON.stringify(load),
  });
  assert.equal(loaded.status, 200, loaded.text);
  return load;
}

test("changes that wait for the writer go to Caddy as one change, each with its own outcome and backup", async (t) => {
  const batched = await setup(t);
  const sequential = await setup(t);
  const a = await startUpstream(t, "a");
  const b = await startUpstream(t, "b");
  const rx = await startReceiver(t);

  const script = (s: typeof batched, cb?: string): Call[] => [
    () => s.svc.create(route("blocker.test", a.port)),
    () => s.svc.create(route("c.test", a.port, cb)),
    () => s.svc.create(route("c.test", b.port, cb)),
    () => s.svc.delete("c.test", cb),
    () => s.svc.create(route("d.test", a.port, cb)),
    () => s.svc.replace("a.test", route("a.test", b.port, cb)),
    () => s.svc.delete("b.test", cb),
    () => s.svc.replace("zz.test", route("zz.test", a.port, cb)),
    () => s.svc.delete("a.test", cb),
    () => s.svc.create(route("a.test", a.port, cb)),
  ];
  for (const s of [batched, sequential]) {
    await s.svc.create(route("a.test", a.port));
    await s.svc.create(route("b.test", a.port));
  }
  batched.writes.length = 0;

  // Called back to back, so they reach the writer in this order: the first goes alone, the rest wait for it.
  const got = await outcomes(script(batched, rx.url));
  const expected = ["ok", "ok", "route_exists", "ok", "ok", "ok", "ok", "route_not_found", "ok", "ok"];
  assert.deepEqual(got, expected);
  assert.equal(
    batched.writes.length,
    2,
    `one write for the first change, one for the batch: ${batched.writes.join(", ")}`,
  );

  // The same calls one after another give the same answers and the same config.
  const one: (string | number)[] = [];
  for (const c of script(sequential)) one.push(...(await outcomes([c])));
  assert.deepEqual(one, expected);
  assert.equal(canonicalJson(await batched.routesOf()), canonicalJson(await sequential.routesOf()));

  // Each applied change captured the state it replaced, as it stood after the changes before it.
  const rows = batched.app.services.db
    .prepare(
      "SELECT operation, route_id, previous, outcome FROM route_changes WHERE route_id != 'blocker.test' AND id > 2 ORDER BY id",
    )
    .all() as { operation: string; route_id: string; previous: string | null; outcome: string }[];
  const upstream = (p: string | null) =>
    p === null
      ? null
      : (JSON.parse(p) as { handle: { upstreams: { dial: string }[] }[] }).handle[0]?.upstreams[0]?.dial;
  assert.deepEqual(
    rows.map((r) => [r.operation, r.route_id, upstream(r.previous), r.outcome]),
    [
      ["create", "c.test", null, "applied"],
      ["delete", "c.test", `127.0.0.1:${a.port}`, "applied"],
      ["create", "d.test", null, "applied"],
      ["replace", "a.test", `127.0.0.1:${a.port}`, "applied"],
      ["delete", "b.test", `127.0.0.1:${a.port}`, "applied"],
      ["delete", "a.test", `127.0.0.1:${b.port}`, "applied"],
      ["create", "a.test", null, "applied"],
    ],
  );
  // ... and sent it as its own route_backup event, then its outcome as route_change. Events of one route
  // (to one receiver) go one at a time, in the order written; those of different routes may interleave.
  await rx.waitFor(rows.length * 2, 10_000);
  const received = rx.received.map((w) => w.json);
  for (const id of new Set(rows.map((r) => r.route_id))) {
    const events = received.filter((e) => e.data.route_id === id);
    const changes = rows.filter((r) => r.route_id === id);
    const backups = events.filter((e) => e.type === "route_backup");
    assert.deepEqual(
      backups.map((e) => e.data.operation),
      changes.map((r) => r.operation),
      `backups of ${id}`,
    );
    for (const b of backups) {
      const at = events.indexOf(b);
      const outcome = events.findIndex(
        (e) => e.type === "route_change" && e.data.change_id === b.data.change_id,
      );
      assert.ok(outcome > at, `${id}: the route_change of change ${b.data.change_id} came after its backup`);
      assert.equal(events[outcome]?.data.outcome, "applied");
    }
  }
  assert.equal(new Set(rx.received.map((w) => w.headers["webhook-id"])).size, rows.length * 2);
});

test("a batch Caddy refuses is split so only the refused change fails, with the answer it gets alone", async (t) => {
  const { svc, app, routesOf, writes } = await setup(t);
  const up = await startUpstream(t, "u");
  // No route the API can build makes Caddy refuse it on its own (the API validates what Caddy does not),
  // so this one refusal is simulated: Caddy "refuses" any config carrying the poison route.
  const admin = app.services.caddyAdmin;
  const spied = admin.write.bind(admin);
  t.mock.method(admin, "write", async (...args: Parameters<typeof admin.write>) => {
    if (JSON.stringify(args[2] ?? null).includes("poison.test"))
      throw new CaddyApiError(
        400,
        "loading new config: http app module: provision http: route poison.test refused",
      );
    return spied(...args);
  });
  writes.length = 0;
  const got = await outcomes([
    () => svc.create(route("blocker.test", up.port)),
    () => svc.create(route("p1.test", up.port)),
    () => svc.create(route("p2.test", up.port)),
    () => svc.create(route("poison.test", up.port)),
    () => svc.create(route("p3.test", up.port)),
    () => svc.delete("p1.test", undefined),
    () => svc.create(route("p4.test", up.port)),
  ]);
  assert.deepEqual(got, ["ok", "ok", "ok", "proxy_rejected_change", "ok", "ok", "ok"]);
  const ids = (await routesOf()).map((r) => (r as { "@id": string })["@id"]);
  assert.deepEqual(ids, ["blocker.test", "p2.test", "p3.test", "p4.test"]);
  assert.deepEqual(await outcomes([() => svc.create(route("poison.test", up.port))]), [
    "proxy_rejected_change",
  ]);
  const outcomesInDb = app.services.db
    .prepare("SELECT outcome FROM route_changes WHERE route_id = 'poison.test'")
    .all();
  assert.deepEqual(outcomesInDb, [{ outcome: "failed" }, { outcome: "failed" }]);
});

test("a single change on an idle writer goes straight to Caddy as one targeted write", async (t) => {
  const { svc, writes } = await setup(t);
  const up = await startUpstream(t, "u");
  writes.length = 0;
  await svc.create(route("solo.test", up.port));
  await svc.replace("solo.test", { ...route("solo.test", up.port), terminal: false });
  await svc.delete("solo.test", undefined);
  assert.deepEqual(writes, [
    "POST /config/apps/http/servers/srv0/routes",
    "PATCH /config/apps/http/servers/srv0/routes/0",
    "DELETE /config/apps/http/servers/srv0/routes/0",
  ]);
});

test("after a slow write, a burst of changes that finds the writer idle goes to Caddy as one write", async (t) => {
  const { caddy, svc, writes } = await setup(t, "100");
  const up = await startUpstream(t, "u");
  const load = await loadMany(caddy);
  await svc.create(route("first.test", up.port));
  writes.length = 0;
  const ids = Array.from({ length: 10 }, (_, i) => `burst${i}.test`);
  const got = await outcomes(ids.map((id) => () => svc.create(route(id, up.port))));
  assert.deepEqual(
    got,
    ids.map(() => "ok"),
  );
  // New hosts go after every route: the write carries only them, appended.
  assert.deepEqual(
    writes,
    ["POST /config/apps/http/servers/srv0/routes/..."],
    "the whole burst in one write",
  );
  const held = JSON.parse((await caddy.admin.read("/config/apps/http/servers/srv0/routes")).text) as {
    "@id": string;
  }[];
  assert.deepEqual(
    held.map((r) => r["@id"]),
    [...load.map((r) => r["@id"]), "first.test", ...ids],
  );

  // A burst that also deletes a route is written whole.
  writes.length = 0;
  const mixed = await outcomes([
    ...["more0.test", "more1.test"].map((id) => () => svc.create(route(id, up.port))),
    () => svc.delete("load5.test", undefined),
  ]);
  assert.deepEqual(mixed, ["ok", "ok", "ok"]);
  assert.deepEqual(writes, ["PATCH /config/apps/http/servers/srv0/routes"]);
  const after = JSON.parse((await caddy.admin.read("/config/apps/http/servers/srv0/routes")).text) as {
    "@id": string;
  }[];
  assert.equal(after.length, held.length + 1);
  assert.ok(!after.some((r) => r["@id"] === "load5.test"));
});

test("a burst that gathers after a slow write still refuses a create whose id another server of Caddy uses", async (t) => {
  const { caddy, svc, writes, app } = await setup(t, "100");
  const up = await startUpstream(t, "u");
  // The ids are looked up in the gather window the slow write opens.
  await loadMany(caddy);
  await caddy.admin.write("POST", "/config/apps/http/servers/other", {
    listen: ["127.0.0.1:0"],
    routes: [{ "@id": "taken.test", handle: [{ handler: "static_response", body: "x" }] }],
  });
  await svc.create(route("first.test", up.port));
  // The burst finds the writer idle, so its first change waits for the others.
  await app.services.writer.whenIdle();
  writes.length = 0;
  const ids = ["g0.test", "taken.test", "g1.test"];
  const got = await outcomes(ids.map((id) => () => svc.create(route(id, up.port))));
  assert.deepEqual(got, ["ok", "route_exists", "ok"]);
  assert.deepEqual(writes, ["POST /config/apps/http/servers/srv0/routes/..."], "the burst in one write");
  const held = JSON.parse((await caddy.admin.read("/config/apps/http/servers/srv0/routes")).text) as {
    "@id": string;
  }[];
  assert.deepEqual(
    held.slice(-3).map((r) => r["@id"]),
    ["first.test", "g0.test", "g1.test"],
  );
});
