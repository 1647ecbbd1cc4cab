import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import pino from "pino";
import { routesStateFrom } from "../../src/caddy/routes/caddy-routes.js";
import type { RouteJson } from "../../src/caddy/routes/plan.js";
import { OnDemandGate } from "../../src/certificates/on-demand-gate.js";
import { OnDemandHosts, onDemandMigrations } from "../../src/certificates/on-demand-store.js";
import { openDatabase } from "../../src/store/db.js";

const route = (id: string, hosts?: string[]): RouteJson => ({
  "@id": id,
  ...(hosts ? { match: [{ host: hosts }] } : {}),
});

function gate(
  routes: RouteJson[],
  limits: { maxPerRoute: number; perMinute: number },
  clock: { now: number },
) {
  const dir = mkdtempSync(join(tmpdir(), "hk-on-demand-"));
  const db = openDatabase(dir, onDemandMigrations);
  const hosts = new OnDemandHosts(db);
  const state = routesStateFrom(routes, '"etag"');
  const g = new OnDemandGate({
    routes: { current: async () => ({ state, cached: true }) },
    hosts,
    limits,
    log: pino({ level: "silent" }),
    now: () => clock.now,
  });
  return {
    verdict: async (host: string) => (await g.decide(host)).verdict,
    hosts,
    done: () => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

test("on-demand permission: exact hosts, the first wildcard route taking a host, its limit, and the rate per minute", async (t) => {
  const clock = { now: 1_000_000 };
  const routes = [
    route("app.example.test", ["app.example.test"]),
    route("catch-all"),
    route("*.preview.example.test", ["*.preview.example.test"]),
    route("*.other.example.test", ["*.OTHER.example.test"]),
  ];
  const g = gate(routes, { maxPerRoute: 2, perMinute: 3 }, clock);
  t.after(g.done);
  assert.equal(await g.verdict("APP.example.test."), "exact_route");
  assert.equal(await g.verdict("a.preview.example.test"), "allowed");
  assert.equal(await g.verdict("a.preview.example.test"), "allowed_before");
  assert.equal(await g.verdict("b.preview.example.test"), "allowed");
  assert.equal(await g.verdict("c.preview.example.test"), "route_limit");
  // One label only, as Caddy's matcher: a deeper name is no route's; a catch-all route is not a wildcard.
  assert.equal(await g.verdict("x.c.preview.example.test"), "no_route");
  assert.equal(await g.verdict("nothing.example.test"), "no_route");
  assert.equal(await g.verdict("127.0.0.1"), "not_a_name");
  assert.equal(await g.verdict("a b.example.test"), "not_a_name");
  // The third new host this minute is allowed, the fourth waits for the minute to pass.
  assert.equal(await g.verdict("a.other.example.test"), "allowed");
  assert.equal(await g.verdict("b.other.example.test"), "rate_limit");
  clock.now += 60_000;
  assert.equal(await g.verdict("b.other.example.test"), "allowed");
  assert.equal(g.hosts.count("*.preview.example.test"), 2);
  // A route gone (deleted): its hosts are forgotten, so one created again starts from none.
  assert.equal(g.hosts.keepOnly(new Set(["*.other.example.test"])), 1);
  assert.equal(g.hosts.count("*.preview.example.test"), 0);
});
