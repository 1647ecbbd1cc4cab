import assert from "node:assert/strict";
import { test } from "node:test";
import pino from "pino";
import { CaddyConfigFields } from "../../src/caddy/config-fields.js";
import { CachedRoutes } from "../../src/caddy/routes/cached-routes.js";
import type { Op, RouteJson } from "../../src/caddy/routes/plan.js";
import { RecordedChange } from "../../src/proxy/journal.js";
import { RouteWriter } from "../../src/proxy/writer.js";
import { caddyMetric, startCaddy } from "../helpers/caddy.js";

const ROUTES = "/config/apps/http/servers/srv0/routes";

const route = (id: string): RouteJson & { "@id": string } => ({
  "@id": id,
  match: [{ host: [id] }],
  handle: [{ handler: "reverse_proxy", upstreams: [{ dial: "127.0.0.1:9" }] }],
});

test("routes kept compressed while the agent is idle serve the next change without reading Caddy again", async (t) => {
  const caddy = await startCaddy(t);
  // More than the 64 KiB kept as plain text.
  const loaded = Array.from({ length: 800 }, (_, i) => route(`load${i}.idle.test`));
  await caddy.admin.write("PATCH", ROUTES, loaded);
  const routes = new CachedRoutes(caddy.admin, { server: "srv0", listen: ["127.0.0.1:0"], parsedKeptMs: 50 });
  const writer = new RouteWriter(routes, {
    log: pino({ level: "silent" }),
    config: new CaddyConfigFields(caddy.admin),
    // The write path alone: nothing records the changes.
    journal: { capture: () => {}, settle: (_c, _e, done) => done(), together: (fn) => fn() },
  });
  const change = (op: Op) =>
    new RecordedChange(op, { operation: op.kind, route_id: "", request_id: null }, undefined);
  const first = await writer.submit(change({ kind: "create", route: route("a.idle.test") }));
  assert.equal(first.outcome.kind, "applied");
  await writer.whenIdle();
  // The routes read after that change were parsed, kept 50 ms, and are now held compressed.
  const cache = () => (routes as unknown as { cache: { held?: object } }).cache.held;
  for (let i = 0; i < 100 && !(cache() && "deflated" in (cache() as object)); i++)
    await new Promise((r) => setTimeout(r, 20));
  assert.ok(cache() && "deflated" in (cache() as object), "the idle routes are held compressed");

  // The next change plans on them: Caddy sees no read of the routes, neither before the write nor after it
  // (the new ETag is computed), and the change lands where it would have on a fresh read.
  const reads = () => caddyMetric(caddy.admin, "caddy_admin_http_requests_total", { method: "GET" });
  const before = await reads();
  const deleted = await writer.submit(change({ kind: "delete", id: "load5.idle.test" }));
  assert.equal(deleted.outcome.kind, "applied");
  assert.deepEqual(deleted.outcome.kind === "applied" && deleted.previous, loaded[5]);
  await writer.whenIdle();
  // GETs: the /metrics read of this line itself.
  assert.equal((await reads()) - before, 1);
  const now = JSON.parse((await caddy.admin.read(ROUTES)).text) as RouteJson[];
  assert.deepEqual(
    now.map((r) => r["@id"]),
    [...loaded.filter((_, i) => i !== 5), route("a.idle.test")].map((r) => r["@id"]),
  );
});
