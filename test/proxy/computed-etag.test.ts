import assert from "node:assert/strict";
import { type TestContext, test } from "node:test";
import type pino from "pino";
import type { CaddyAdmin } from "../../src/caddy/admin.js";
import { buildTestApp, PLAIN_ROUTES } from "../helpers/app.js";
import { caddyMetric, startCaddy } from "../helpers/caddy.js";
import { capturedLogger } from "../helpers/logs.js";

// After a write the agent computes the routes' new ETag (caddy/etag.ts) instead of reading every route
// back; the next write's If-Match is Caddy's check of it.

const ROUTES = "/config/apps/http/servers/srv0/routes";

/** These count Caddy's reads of the cached store (cached-routes.ts), which TEST_ROUTES_BACKEND=plain replaces. */
const skip = PLAIN_ROUTES && "the plain routes store reads the routes for every change and computes no ETag";

const route = (domain: string, port = 9) => ({ domain, upstreams: [{ dial: `127.0.0.1:${port}` }] });

/** Routes the agent did not write, with text Go writes its own way (HTML characters, non-ASCII, numbers). */
const outside = (i: number) => ({
  "@id": `outside${i}.etag.test`,
  match: [{ host: [`outside${i}.etag.test`], path: ["/a&b/<c>/ü/*"] }],
  handle: [{ handler: "static_response", body: `<b>"${i}" & ü ☃ 😀</b>`, status_code: 202 }],
});

async function setup(t: TestContext, logger?: pino.Logger) {
  const caddy = await startCaddy(t);
  await caddy.admin.write("PATCH", ROUTES, [outside(1), outside(2)]);
  const h = await buildTestApp(
    t,
    { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, HOSTKEEPER_ROUTE_GATHER_MAX_MS: "0" },
    logger ? { logger } : {},
  );
  const svc = h.app.services.routes;
  const metric = async (labels: Record<string, string>) => {
    const n = await caddyMetric(caddy.admin, "caddy_admin_http_requests_total", labels);
    return Number.isNaN(n) ? 0 : n;
  };
  /** Reads of Caddy's config (the agent's reads of its routes among them) and If-Match failures so far. */
  const counts = async () => ({
    reads: await metric({ method: "GET", path: "/config/" }),
    stale: await metric({ code: "412" }),
    patches: await metric({ method: "PATCH", path: "/config/" }),
    writes:
      (await metric({ method: "POST", path: "/config/" })) +
      (await metric({ method: "PATCH", path: "/config/" })) +
      (await metric({ method: "DELETE", path: "/config/" })),
  });
  return { caddy, svc, counts, admin: h.app.services.caddyAdmin };
}

/**
 * Singles and bursts of every kind of change: the first change of a burst goes alone (no gather window
 * here), the others wait for it and go together, as an append of new routes or as all routes.
 */
async function changes(svc: Awaited<ReturnType<typeof setup>>["svc"], tag: string): Promise<void> {
  await svc.create(route(`one.${tag}.test`));
  await svc.replace(`one.${tag}.test`, route(`one.${tag}.test`, 10));
  await Promise.all([0, 1, 2, 3].map((i) => svc.create(route(`b${i}.${tag}.test`))));
  await Promise.all([
    svc.create(route(`c.${tag}.test`)),
    svc.delete(`b0.${tag}.test`, null),
    svc.replace(`b1.${tag}.test`, route(`b1.${tag}.test`, 11)),
    svc.create(route(`d.${tag}.test`)),
  ]);
  await svc.delete(`one.${tag}.test`, null);
}

test("after its first read the agent writes singles and bursts without reading the routes again, and no If-Match fails", {
  skip,
}, async (t) => {
  const { caddy, svc, counts } = await setup(t);
  await svc.create(route("first.etag.test"));
  const before = await counts();
  await changes(svc, "x");
  const after = await counts();
  // Each count reads /metrics once; nothing else read Caddy's config.
  assert.equal(after.reads - before.reads, 0);
  assert.equal(after.stale, 0);
  assert.ok(after.patches - before.patches >= 2, "a batch wrote all routes");
  const ids = (JSON.parse((await caddy.admin.read(ROUTES)).text) as { "@id"?: string }[]).map(
    (r) => r["@id"],
  );
  assert.deepEqual(ids, [
    "outside1.etag.test",
    "outside2.etag.test",
    "first.etag.test",
    "b1.x.test",
    "b2.x.test",
    "b3.x.test",
    "c.x.test",
    "d.x.test",
  ]);
});

test("a change made in Caddy behind the agent's back fails the computed ETag once; the change lands and the next ones compute again", {
  skip,
}, async (t) => {
  const { caddy, svc, counts } = await setup(t);
  await svc.create(route("first.etag.test"));
  await caddy.admin.write("POST", ROUTES, outside(3));
  await svc.create(route("second.etag.test"));
  assert.equal((await counts()).stale, 1);
  const before = await counts();
  await changes(svc, "y");
  const after = await counts();
  assert.equal(after.stale, 1);
  assert.equal(after.reads - before.reads, 0);
  const text = (await caddy.admin.read(ROUTES)).text;
  for (const id of ["outside3.etag.test", "second.etag.test", "c.y.test"])
    assert.ok(text.includes(`"${id}"`));
});

/**
 * Gives the agent's admin client ETags for the routes that are not the hashes it computes, as a Caddy whose
 * Go writes JSON differently would (no real Caddy does: the encoding is checked in test/caddy/etag.test.ts),
 * and turns them back on the way to Caddy. A mock only to force that failure.
 */
function disguiseRouteEtags(t: TestContext, admin: CaddyAdmin): void {
  const flip = (etag: string | undefined) =>
    etag?.startsWith(`"${ROUTES} `)
      ? etag.replace(/[0-9a-f](?=[0-9a-f]*"$)/g, (c) => (15 - Number.parseInt(c, 16)).toString(16))
      : etag;
  const read = admin.read.bind(admin);
  const write = admin.write.bind(admin);
  t.mock.method(admin, "read", async (...args: Parameters<CaddyAdmin["read"]>) => {
    const res = await read(...args);
    return { ...res, etag: flip(res.etag) };
  });
  t.mock.method(admin, "write", (...[method, path, body, ifMatch]: Parameters<CaddyAdmin["write"]>) =>
    write(method, path, body, flip(ifMatch)),
  );
}

test("when Caddy's ETag of the routes is not the computed one, the agent says so once and reads the ETag after each write from then on", {
  skip,
}, async (t) => {
  const { log, lines } = capturedLogger("warn");
  const { caddy, svc, counts, admin } = await setup(t, log);
  disguiseRouteEtags(t, admin);
  await svc.create(route("first.etag.test"));
  // Its computed ETag fails once; the agent reads the routes, finds the computation is not Caddy's, and the
  // change lands on that read.
  await svc.create(route("second.etag.test"));
  assert.equal((await counts()).stale, 1);
  assert.equal(lines.filter((l) => l.includes("does not reproduce")).length, 1, lines.join("\n"));
  const before = await counts();
  await changes(svc, "z");
  const after = await counts();
  assert.equal(after.stale, 1, "no If-Match failed after that");
  // One read after each write (the last one's may come after this count).
  const reads = after.reads - before.reads;
  const writes = after.writes - before.writes;
  assert.ok(
    writes >= 5 && reads >= writes - 1,
    `the routes are read after the writes: ${reads} after ${writes}`,
  );
  const text = (await caddy.admin.read(ROUTES)).text;
  for (const id of ["first.etag.test", "second.etag.test", "c.z.test"]) assert.ok(text.includes(`"${id}"`));
});
