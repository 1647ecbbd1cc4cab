import assert from "node:assert/strict";
import http from "node:http";
import { describe, test } from "node:test";
import { packageVersion } from "../../src/paths.js";
import { buildTestApp } from "../helpers/app.js";
import { caddyMetric, startCaddy } from "../helpers/caddy.js";
import { startReceiver, startUpstream } from "../helpers/http.js";

/**
 * A loopback door to Caddy's admin API that resets every connection while `resetting` is set: Caddy's
 * admin endpoint restarting after a config change for longer than the agent's retries last, which a real
 * Caddy does only now and then under load. It passes requests on with the Host Caddy's admin API accepts.
 * Closed when the test ends.
 */
async function resettingDoor(t: Parameters<typeof startCaddy>[0], adminUrl: string) {
  const target = new URL(adminUrl);
  const door = { resetting: false, url: "" };
  const server = http.createServer((req, res) => {
    if (door.resetting) {
      req.socket.resetAndDestroy();
      return;
    }
    const headers = { ...req.headers, host: target.host };
    const upstream = http.request(
      { host: target.hostname, port: Number(target.port), method: req.method, path: req.url, headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  door.url = `http://127.0.0.1:${port}`;
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return door;
}

/** The agent on a Caddy of its own (HOSTKEEPER_CADDY_ADMIN), as an operator of another Caddy would run it. */
async function setup(t: Parameters<typeof startCaddy>[0], opts: { withServer?: boolean } = {}) {
  const caddy = await startCaddy(t, opts);
  const h = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${caddy.httpPort}`,
    // Status asks the package manager its version only, with buildTestApp's empty apt configuration.
    HOSTKEEPER_PACKAGE_MANAGER: "apt",
  });
  return { caddy, ...h };
}

describe("GET /readyz", () => {
  test("200 without a token when the database, Caddy's admin API and the listeners answer", async (t) => {
    const { app, caddy } = await setup(t);
    const r = await app.inject({ method: "GET", url: "/readyz" });
    assert.equal(r.statusCode, 200, r.body);
    assert.deepEqual(r.json(), {
      status: "ready",
      checks: {
        database: { status: "ok", detail: "answers" },
        caddy_admin: { status: "ok", detail: "answers" },
        listeners: { status: "ok", detail: `bound: 127.0.0.1:${caddy.httpPort}` },
      },
    });
  });

  test("503 naming the failing checks while Caddy is down, 200 once it is back", async (t) => {
    const { app, caddy } = await setup(t);
    await caddy.stop();
    const down = await app.inject({ method: "GET", url: "/readyz" });
    assert.equal(down.statusCode, 503, down.body);
    const body = down.json();
    assert.equal(body.status, "not_ready");
    assert.equal(body.checks.database.status, "ok");
    assert.equal(body.checks.caddy_admin.status, "failing");
    assert.match(body.checks.caddy_admin.detail, /ECONNREFUSED/);
    assert.equal(body.checks.listeners.status, "failing");
    await caddy.start();
    assert.equal((await app.inject({ method: "GET", url: "/readyz" })).statusCode, 200);
  });

  test("503 when the database fails the probe's query", async (t) => {
    const { app } = await setup(t);
    // The table the probe reads, gone: a real failure of the query, which nothing else reads after the start.
    app.services.db.exec("DROP TABLE schema_migrations");
    const r = await app.inject({ method: "GET", url: "/readyz" });
    assert.equal(r.statusCode, 503, r.body);
    assert.deepEqual(r.json().checks.database, {
      status: "failing",
      detail: "does not answer: no such table: schema_migrations",
    });
    assert.equal(r.json().checks.caddy_admin.status, "ok");
  });

  test("200 throughout 200 route changes probed every 50 ms, though Caddy restarts its admin endpoint after each", async (t) => {
    const { app, call } = await setup(t);
    const up = await startUpstream(t, "u");
    let changing = true;
    let probes = 0;
    const changes = (async () => {
      try {
        // 200 changes (100 creates, 100 deletes), and on until 40 probes were made among them: on a loaded
        // machine the probes come more slowly than the changes (one run of the whole suite saw 20 in 60).
        for (let i = 0; i < 100 || (probes < 40 && i < 400); i++) {
          const payload = { domain: `r${i}.test`, upstreams: [{ dial: `127.0.0.1:${up.port}` }] };
          const created = await call({ method: "POST", url: "/v1/proxy/routes", payload });
          assert.equal(created.statusCode, 201, created.body);
          const deleted = await call({ method: "DELETE", url: `/v1/proxy/routes/r${i}.test` });
          assert.equal(deleted.statusCode, 204, deleted.body);
        }
      } finally {
        changing = false;
      }
    })();
    // Without retries, about one probe in seven met the reset (ECONNRESET) and answered 503.
    const notReady: string[] = [];
    // A probe every 50 ms, as a load balancer's would come.
    while (changing) {
      const r = await app.inject({ method: "GET", url: "/readyz" });
      probes++;
      if (r.statusCode !== 200) notReady.push(r.body);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await changes;
    // Enough probes that, at one in seven, a reset not retried would have shown.
    assert.ok(probes >= 40, `readyz was asked ${probes} times`);
    assert.deepEqual(notReady, [], `${notReady.length} of ${probes} probes answered 503`);
  });

  test("ready while Caddy's admin API resets past the retries and its listeners accept; not ready once they refuse too", async (t) => {
    const caddy = await startCaddy(t);
    const door = await resettingDoor(t, caddy.adminUrl);
    const { app } = await buildTestApp(t, {
      HOSTKEEPER_CADDY_ADMIN: door.url,
      HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${caddy.httpPort}`,
    });
    assert.equal((await app.inject({ method: "GET", url: "/readyz" })).statusCode, 200);

    door.resetting = true;
    const reloading = await app.inject({ method: "GET", url: "/readyz" });
    assert.equal(reloading.statusCode, 200, reloading.body);
    const checks = reloading.json().checks;
    assert.equal(checks.caddy_admin.status, "ok");
    assert.match(
      checks.caddy_admin.detail,
      /^not answering now \(.*ECONNRESET.*\), as while Caddy applies a config change; answered \d+ s ago and its listeners accept$/,
    );
    assert.deepEqual(checks.listeners, { status: "ok", detail: `bound: 127.0.0.1:${caddy.httpPort}` });

    // Caddy's process gone: its listeners refuse, and the admin API's silence is the answer.
    await caddy.stop();
    const down = await app.inject({ method: "GET", url: "/readyz" });
    assert.equal(down.statusCode, 503, down.body);
    assert.equal(down.json().checks.caddy_admin.status, "failing");
    assert.match(down.json().checks.caddy_admin.detail, /ECONNRESET/);
    assert.equal(down.json().checks.listeners.status, "failing");
  });

  test("a Caddy without the managed server yet is ready: the first route creates it", async (t) => {
    const { app } = await setup(t, { withServer: false });
    const r = await app.inject({ method: "GET", url: "/readyz" });
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(
      r.json().checks.listeners.detail,
      "the managed server srv0 does not exist yet; the first route creates it",
    );
  });
});

describe("GET /v1/status", () => {
  test("an external Caddy: no PID or restarts of the agent's, routes counted, outbox and updates as they are", async (t) => {
    const { call } = await setup(t);
    const up = await startUpstream(t, "u");
    const failing = await startReceiver(t, { status: () => 500 });
    const gone = await startReceiver(t, { status: () => 410 });
    for (const [domain, callback] of [
      ["one.test", failing.url],
      ["two.test", gone.url],
      ["three.test", undefined],
    ] as const) {
      const r = await call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: {
          domain,
          upstreams: [{ dial: `127.0.0.1:${up.port}` }],
          ...(callback ? { callback_url: callback } : {}),
        },
      });
      assert.equal(r.statusCode, 201, r.body);
    }
    const r = await call({ method: "GET", url: "/v1/status" });
    assert.equal(r.statusCode, 200, r.body);
    const s = r.json();
    assert.equal(s.versions.agent, packageVersion());
    assert.equal(s.versions.node, process.version);
    assert.equal(s.versions.caddy, null, "another's Caddy: its admin API does not say its version");
    assert.equal(s.versions.package_manager.name, "apt");
    const since = (Date.now() - Date.parse(s.started_at)) / 1000;
    assert.ok(since >= 0 && s.uptime_seconds <= since, `up ${s.uptime_seconds} s, started ${since} s ago`);
    assert.deepEqual(s.caddy, {
      mode: "external",
      state: "running",
      pid: null,
      adopted: false,
      restarts: 0,
      last_exit_at: null,
      last_restart_at: null,
    });
    assert.deepEqual(s.routes, { count: 3 });
    // Each change with a callback sends route_backup then route_change, and their first attempts ended before
    // the answers: the 500 receiver's two are retried later, the 410 receiver's two are dead at once.
    assert.deepEqual(s.outbox, { pending: 2, dead: 2 });
    assert.deepEqual(s.updates, {
      last_check_at: null,
      security_updates: null,
      regular_updates: null,
      reboot_required: null,
    });
    assert.deepEqual(s.operator, { active_instance: null });
    assert.equal(s.readiness.status, "ready");
  });

  test("the route count is read once per config Caddy loads, and follows changes made in Caddy directly", async (t) => {
    const { call, caddy } = await setup(t);
    const routes = "/config/apps/http/servers/srv0/routes";
    const one = (id: string) => ({
      "@id": id,
      match: [{ host: [id] }],
      handle: [{ handler: "static_response" }],
    });
    await caddy.admin.write("PATCH", routes, [one("a.count.test"), one("b.count.test")]);
    const count = async () => {
      const r = await call({ method: "GET", url: "/v1/status" });
      assert.equal(r.statusCode, 200, r.body);
      return r.json().routes.count as number;
    };
    const configReads = () =>
      caddyMetric(caddy.admin, "caddy_admin_http_requests_total", { method: "GET", path: "/config/" });
    assert.equal(await count(), 2);
    const before = await configReads();
    for (let i = 0; i < 3; i++) assert.equal(await count(), 2);
    // The readiness check each status makes reads the listen list: one read of Caddy's config each, not two.
    assert.equal(await configReads(), before + 3, "the count read none of Caddy's config again");
    await caddy.admin.write("POST", routes, one("c.count.test"));
    assert.equal(await count(), 3);
  });

  test("Caddy down is a state, not an error", async (t) => {
    const { call, caddy } = await setup(t);
    await caddy.stop();
    const r = await call({ method: "GET", url: "/v1/status" });
    assert.equal(r.statusCode, 200, r.body);
    const s = r.json();
    assert.equal(s.caddy.state, "unreachable");
    assert.equal(s.routes.count, null);
    assert.equal(s.readiness.status, "not_ready");
  });
});
