import assert from "node:assert/strict";
import https from "node:https";
import { test } from "node:test";
import type { RouteJson } from "../../src/caddy/routes/plan.js";
import { HTTPS_REDIRECT_ID } from "../../src/proxy/route/https-redirect.js";
import { freePort } from "../../support/loopback.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy, type TestCaddy } from "../helpers/caddy.js";
import { proxyExchange, sentAgainOnReset, startUpstream } from "../helpers/http.js";
import { waitFor } from "../helpers/wait.js";
import { writesToCaddy } from "./support.js";

/** A plain-HTTP request for `host` on Caddy's HTTP port: its status, Location and body. */
async function plain(port: number, host: string, path = "/") {
  const r = await sentAgainOnReset(() => proxyExchange(port, host, { path }));
  return { status: r.status, location: r.headers.location, body: r.body.toString() };
}

/** A GET over TLS for `host` (SNI and Host) on Caddy's HTTPS port, trusting whatever it serves. */
function overTls(port: number, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.get(
      {
        host: "127.0.0.1",
        port,
        servername: host,
        headers: { host },
        rejectUnauthorized: false,
        agent: false,
      },
      (res) => {
        let body = "";
        res.on("data", (c: Buffer) => {
          body += c.toString();
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on("error", reject);
    req.setTimeout(10_000, () => req.destroy(new Error("timeout")));
  });
}

const routesOf = async (caddy: TestCaddy) =>
  JSON.parse((await caddy.admin.read("/config/apps/http/servers/srv0/routes")).text) as RouteJson[] | null;

/** The hosts the redirect route leaves on plain HTTP; undefined without a redirect route first. */
const kept = (routes: RouteJson[] | null) => {
  const lead = routes?.[0];
  if (lead?.["@id"] !== HTTPS_REDIRECT_ID) return undefined;
  const not = (lead.match?.[0]?.not as { host: string[] }[] | undefined)?.[0]?.host;
  return not ?? [];
};

test("issuer internal: plain HTTP answers 308 to HTTPS for every route's host, except routes written with https_redirect false; read back and restored", {
  timeout: 90_000,
}, async (t) => {
  const caddy = await startCaddy(t, { withServer: false });
  const [httpPort, httpsPort] = [await freePort(), await freePort()];
  const { call, app: agent } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${httpPort},127.0.0.1:${httpsPort}`,
    HOSTKEEPER_CADDY_HTTP_PORT: String(httpPort),
    HOSTKEEPER_CADDY_HTTPS_PORT: String(httpsPort),
    HOSTKEEPER_TLS_ISSUER: "internal",
    HOSTKEEPER_OPERATOR_DOMAIN: "ops.redirect.test",
  });
  const app = await startUpstream(t, "app");
  const open = await startUpstream(t, "open");
  const write = async (method: string, url: string, payload: Record<string, unknown>, status: number) => {
    const r = await call({ method, url, payload });
    assert.equal(r.statusCode, status, r.body);
  };
  const up = (port: number) => [{ dial: `127.0.0.1:${port}` }];
  await write(
    "POST",
    "/v1/proxy/routes",
    { domain: "app.redirect.test", redirect_from: ["www.redirect.test"], upstreams: up(app.port) },
    201,
  );
  await write(
    "POST",
    "/v1/proxy/routes",
    { domain: "open.redirect.test", https_redirect: false, upstreams: up(open.port) },
    201,
  );

  await agent.services.routes.put({
    "@id": "ops.redirect.test",
    match: [{ host: ["ops.redirect.test"] }],
    handle: [{ handler: "static_response", body: "ops" }],
  });

  // Every host of a route and the operator's, path and query unchanged, to the HTTPS port (not 443, so
  // it is named).
  for (const host of ["app.redirect.test", "www.redirect.test", "ops.redirect.test"]) {
    const r = await plain(httpPort, host, "/a/b?c=1&d=%2F");
    assert.equal(r.status, 308, host);
    assert.equal(r.location, `https://${host}:${httpsPort}/a/b?c=1&d=%2F`);
  }
  assert.equal(app.hits(), 0, "no plain-HTTP request reached the upstream");
  // Over TLS the route answers, with a certificate of Caddy's local CA.
  const secure = await waitFor("the route over TLS", () =>
    overTls(httpsPort, "app.redirect.test").catch(() => undefined),
  );
  assert.deepEqual(secure, { status: 200, body: "app" });
  // The route that opted out answers on plain HTTP, and reads back so.
  assert.deepEqual(await plain(httpPort, "open.redirect.test"), {
    status: 200,
    location: undefined,
    body: "open",
  });
  const read = await call({ method: "GET", url: "/v1/proxy/routes/open.redirect.test/request" });
  assert.equal((JSON.parse(read.body) as { https_redirect?: boolean }).https_redirect, false, read.body);
  const listed = JSON.parse((await call({ method: "GET", url: "/v1/proxy/routes" })).body) as RouteJson[];
  assert.equal(listed[0]?.["@id"], HTTPS_REDIRECT_ID, "the redirect route is listed, first");
  assert.deepEqual(kept(listed), ["open.redirect.test"]);

  // Replaced without the field: it redirects, in the same write.
  await write(
    "PUT",
    "/v1/proxy/routes/open.redirect.test",
    { domain: "open.redirect.test", upstreams: up(open.port) },
    200,
  );
  assert.deepEqual(kept(await routesOf(caddy)), []);
  assert.equal((await plain(httpPort, "open.redirect.test")).status, 308);
  // The replace undone (a restore puts back the state a change replaced): on plain HTTP again.
  const history = JSON.parse(
    (await call({ method: "GET", url: "/v1/proxy/routes/open.redirect.test/history" })).body,
  ) as {
    changes: { change_id: number; operation: string }[];
  };
  const replaced = history.changes.find((c) => c.operation === "replace");
  assert.ok(replaced, JSON.stringify(history));
  const restored = await call({
    method: "POST",
    url: "/v1/proxy/routes/open.redirect.test/restore",
    payload: { change_id: replaced.change_id },
  });
  assert.equal(restored.statusCode, 200, restored.body);
  assert.deepEqual(kept(await routesOf(caddy)), ["open.redirect.test"]);
  assert.equal((await plain(httpPort, "open.redirect.test")).status, 200);
  // Deleted: its host is no longer left out.
  assert.equal(
    (await call({ method: "DELETE", url: "/v1/proxy/routes/open.redirect.test" })).statusCode,
    204,
  );
  assert.deepEqual(kept(await routesOf(caddy)), []);
  // A new route goes behind the redirect route, never before it.
  await write("POST", "/v1/proxy/routes", { domain: "*.wild.redirect.test", upstreams: up(app.port) }, 201);
  const routes = (await routesOf(caddy)) ?? [];
  assert.equal(routes[0]?.["@id"], HTTPS_REDIRECT_ID);
  assert.equal((await plain(httpPort, "a.wild.redirect.test")).status, 308);
  // The redirect route is not the API's to change.
  const refused = await call({
    method: "DELETE",
    url: `/v1/proxy/routes/${encodeURIComponent(HTTPS_REDIRECT_ID)}`,
  });
  assert.equal(refused.statusCode, 403, refused.body);
  assert.match(refused.body, /agent_route_immutable/);
  assert.equal((await routesOf(caddy))?.[0]?.["@id"], HTTPS_REDIRECT_ID);
});

test("existing routes get the redirect at the agent's start as one config change; issuer off takes it away", {
  timeout: 60_000,
}, async (t) => {
  const caddy = await startCaddy(t);
  const up = await startUpstream(t, "old");
  const hosts = Array.from({ length: 30 }, (_, i) => `old${i}.redirect.test`);
  const routes = hosts.map((h) => ({
    "@id": h,
    match: [{ host: [h] }],
    handle: [{ handler: "reverse_proxy", upstreams: [{ dial: `127.0.0.1:${up.port}` }] }],
    terminal: true,
  }));
  await caddy.admin.write("PATCH", "/config/apps/http/servers/srv0/routes", routes);
  assert.equal((await plain(caddy.httpPort, "old7.redirect.test")).status, 200);
  const env = {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_HTTP_PORT: String(caddy.httpPort),
    HOSTKEEPER_TLS_ISSUER: "internal",
  };
  const first = await buildTestApp(t, env);
  // The issuer's policy, http_port and the server's automatic HTTPS (fields), and the routes: one change
  // for all 30.
  assert.equal(await writesToCaddy(first.call), 4);
  for (const h of [hosts[0], hosts[29]] as string[]) {
    const r = await plain(caddy.httpPort, h, "/x");
    assert.equal(r.status, 308, h);
    assert.equal(r.location, `https://${h}/x`, "443 is left out of the URL");
  }
  assert.equal((await routesOf(caddy))?.length, 31);
  assert.equal(up.hits(), 1);
  // Started again: nothing to change.
  assert.equal(await writesToCaddy((await buildTestApp(t, env)).call), 0);
  // Issuer off: the redirect route goes, with automatic HTTPS and the policy.
  const off = await buildTestApp(t, { ...env, HOSTKEEPER_TLS_ISSUER: "off" });
  assert.ok((await writesToCaddy(off.call)) >= 1);
  assert.equal(kept(await routesOf(caddy)), undefined);
  assert.deepEqual(await plain(caddy.httpPort, "old7.redirect.test"), {
    status: 200,
    location: undefined,
    body: "old",
  });
});

test("a Caddy without the managed server gets none at start: the redirect comes with the server's first route", {
  timeout: 60_000,
}, async (t) => {
  const other = await freePort();
  const caddy = await startCaddy(t, {
    withServer: false,
    extra: { apps: { http: { servers: { other: { listen: [`127.0.0.1:${other}`], routes: [] } } } } },
  });
  const [httpPort, httpsPort] = [await freePort(), await freePort()];
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${httpPort},127.0.0.1:${httpsPort}`,
    HOSTKEEPER_CADDY_HTTP_PORT: String(httpPort),
    HOSTKEEPER_CADDY_HTTPS_PORT: String(httpsPort),
    HOSTKEEPER_TLS_ISSUER: "internal",
  });
  const servers = async () =>
    Object.keys(JSON.parse((await caddy.admin.read("/config/apps/http/servers")).text) as object);
  assert.deepEqual(await servers(), ["other"]);
  const up = await startUpstream(t, "first");
  const created = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: { domain: "first.redirect.test", upstreams: [{ dial: `127.0.0.1:${up.port}` }] },
  });
  assert.equal(created.statusCode, 201, created.body);
  assert.deepEqual((await servers()).sort(), ["other", "srv0"]);
  assert.deepEqual(
    ((await routesOf(caddy)) ?? []).map((r) => r["@id"]),
    [HTTPS_REDIRECT_ID, "first.redirect.test"],
  );
  assert.equal((await plain(httpPort, "first.redirect.test")).status, 308);
});
