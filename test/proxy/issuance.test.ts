import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { test } from "node:test";
import { ISSUANCE_POLICY_ID } from "../../src/caddy/issuance.js";
import { freePort } from "../../support/loopback.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy, type TestCaddy } from "../helpers/caddy.js";
import { hostPackageState } from "../helpers/host-state.js";
import { closeAfter, startUpstream, viaProxy } from "../helpers/http.js";
import { waitFor } from "../helpers/wait.js";
import { localRoot, servedCertificate, TRUST_STORES } from "./issuance-support.js";
import { writesToCaddy } from "./support.js";

const readConfig = async (caddy: TestCaddy, path: string) =>
  JSON.parse((await caddy.admin.read(`/config/${path}`)).text) as unknown;

const route = (domain: string, port: number) => ({ domain, upstreams: [{ dial: `127.0.0.1:${port}` }] });

test("issuer internal: a route's host and the operator's get a certificate of Caddy's local CA on the HTTPS port; the ports stay through route changes", {
  timeout: 120_000,
}, async (t) => {
  const trustBefore = hostPackageState(TRUST_STORES);
  const caddy = await startCaddy(t, { withServer: false });
  const httpPort = await freePort();
  const httpsPort = await freePort();
  const { call, app } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${httpPort},127.0.0.1:${httpsPort}`,
    HOSTKEEPER_CADDY_HTTP_PORT: String(httpPort),
    HOSTKEEPER_CADDY_HTTPS_PORT: String(httpsPort),
    HOSTKEEPER_TLS_ISSUER: "internal",
    HOSTKEEPER_OPERATOR_DOMAIN: "ops.issuance.test",
  });
  const up = await startUpstream(t, "app");
  // The first route creates the managed server, which comes with the ports, the issuer and the CA's trust.
  const created = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("app.issuance.test", up.port),
  });
  assert.equal(created.statusCode, 201, created.body);
  await app.services.routes.put({
    "@id": "ops.issuance.test",
    match: [{ host: ["ops.issuance.test"] }],
    handle: [{ handler: "static_response", body: "ops" }],
    terminal: true,
  });

  const root = await waitFor("Caddy's local CA root", () => localRoot(join(caddy.dir, "data")));
  for (const host of ["app.issuance.test", "ops.issuance.test"]) {
    const served = await waitFor(`a certificate for ${host}`, () => servedCertificate(httpsPort, host, root));
    assert.equal(served.authorized, true, `${host}: ${served.error}`);
    assert.match(served.issuer, /^Caddy Local Authority/);
    assert.equal(served.altNames, `DNS:${host}`);
  }
  // The HTTPS port speaks TLS only; the HTTP port redirects to it (https-redirect.test.ts).
  const plainOnTls = await viaProxy(httpsPort, "app.issuance.test");
  assert.equal(plainOnTls.status, 400);
  assert.match(plainOnTls.body, /HTTP request to an HTTPS server/);
  assert.equal((await viaProxy(httpPort, "app.issuance.test")).status, 308);

  const kept = async () => ({
    http_port: await readConfig(caddy, "apps/http/http_port"),
    https_port: await readConfig(caddy, "apps/http/https_port"),
    policies: await readConfig(caddy, "apps/tls/automation/policies"),
    install_trust: await readConfig(caddy, "apps/pki/certificate_authorities/local/install_trust"),
    automatic_https: await readConfig(caddy, "apps/http/servers/srv0/automatic_https"),
  });
  const expected = {
    http_port: httpPort,
    https_port: httpsPort,
    policies: [{ "@id": ISSUANCE_POLICY_ID, issuers: [{ module: "internal" }] }],
    install_trust: false,
    automatic_https: null,
  };
  assert.deepEqual(await kept(), expected);
  // Route changes write the routes only: what the agent keeps beside them stays.
  const other = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("two.issuance.test", up.port),
  });
  assert.equal(other.statusCode, 201, other.body);
  const gone = await call({ method: "DELETE", url: "/v1/proxy/routes/two.issuance.test" });
  assert.equal(gone.statusCode, 204, gone.body);
  assert.deepEqual(await kept(), expected);

  assert.deepEqual(hostPackageState(TRUST_STORES), trustBefore, "the host's trust stores are untouched");
});

test("issuer off: a listen address that would serve TLS answers plain HTTP", {
  timeout: 60_000,
}, async (t) => {
  const caddy = await startCaddy(t, { withServer: false });
  const port = await freePort();
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    // Not the HTTP port (80): with an issuer this address would serve TLS.
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${port}`,
    HOSTKEEPER_TLS_ISSUER: "off",
  });
  const up = await startUpstream(t, "plain");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("plain.issuance.test", up.port),
  });
  assert.equal(res.statusCode, 201, res.body);
  assert.deepEqual(await viaProxy(port, "plain.issuance.test"), { status: 200, body: "plain" });
  assert.deepEqual(await readConfig(caddy, "apps/http/servers/srv0/automatic_https"), { disable: true });
  assert.equal(await readConfig(caddy, "apps/tls"), null, "no policy of the agent's");
});

test("issuer acme: Caddy asks HOSTKEEPER_ACME_CA's directory for a route's host and registers the configured e-mail there", {
  timeout: 60_000,
}, async (t) => {
  // A loopback server standing in for the ACME CA (RFC 8555): a directory, nonces, and an account
  // endpoint that records the new account's payload and refuses it, which ends the attempt there.
  const asked: { method: string; path: string; agent: string }[] = [];
  const accounts: { contact?: string[] }[] = [];
  const ca = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      asked.push({
        method: req.method ?? "",
        path: req.url ?? "",
        agent: String(req.headers["user-agent"] ?? ""),
      });
      const base = `http://127.0.0.1:${(ca.address() as AddressInfo).port}/acme`;
      res.setHeader("replay-nonce", `n${asked.length}`);
      if (req.url === "/acme/directory")
        return res.writeHead(200, { "content-type": "application/json" }).end(
          JSON.stringify({
            newNonce: `${base}/nonce`,
            newAccount: `${base}/account`,
            newOrder: `${base}/order`,
            revokeCert: `${base}/revoke`,
            keyChange: `${base}/key`,
          }),
        );
      if (req.url === "/acme/nonce") return res.writeHead(200).end();
      if (req.url === "/acme/account") {
        const jws = JSON.parse(Buffer.concat(chunks).toString()) as { payload: string };
        accounts.push(JSON.parse(Buffer.from(jws.payload, "base64url").toString()));
      }
      res
        .writeHead(400, { "content-type": "application/problem+json" })
        .end(JSON.stringify({ type: "urn:ietf:params:acme:error:malformed", detail: "test CA" }));
    });
  });
  await new Promise<void>((r) => ca.listen(0, "127.0.0.1", r));
  closeAfter(t, ca);
  const directory = `http://127.0.0.1:${(ca.address() as AddressInfo).port}/acme/directory`;
  const caddy = await startCaddy(t, { withServer: false });
  const httpsPort = await freePort();
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${httpsPort}`,
    HOSTKEEPER_CADDY_HTTPS_PORT: String(httpsPort),
    HOSTKEEPER_TLS_ISSUER: "acme",
    HOSTKEEPER_ACME_CA: directory,
    HOSTKEEPER_ACME_EMAIL: "ops@issuance.example",
  });
  assert.equal(asked.length, 0, "no host, no request to the CA");
  const up = await startUpstream(t, "acme");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: route("acme.issuance.example", up.port),
  });
  assert.equal(res.statusCode, 201, res.body);
  const first = await waitFor("Caddy's request to the ACME directory", () => asked[0]);
  assert.deepEqual([first.method, first.path], ["GET", "/acme/directory"]);
  assert.match(first.agent, /CertMagic/);
  // The account Caddy registers there carries the configured e-mail address.
  const account = await waitFor("Caddy's new account at the CA", () => accounts[0]);
  assert.deepEqual(account.contact, ["mailto:ops@issuance.example"]);
  assert.deepEqual(await readConfig(caddy, "apps/tls/automation/policies"), [
    {
      "@id": ISSUANCE_POLICY_ID,
      issuers: [{ module: "acme", ca: directory, email: "ops@issuance.example" }],
    },
  ]);
});

test("an adopted Caddy whose config differs is brought in line at start, one change per differing field, none the next time", {
  timeout: 60_000,
}, async (t) => {
  const caddy = await startCaddy(t, {
    extra: {
      apps: {
        // Someone else's policies: one naming its hosts (kept), one catch-all (the agent's place).
        tls: {
          automation: {
            policies: [
              { subjects: ["other.issuance.test"], issuers: [{ module: "internal" }] },
              { issuers: [{ module: "acme", email: "old@issuance.example" }] },
            ],
          },
        },
      },
    },
  });
  const env = { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, HOSTKEEPER_TLS_ISSUER: "internal" };
  const first = await buildTestApp(t, { ...env, HOSTKEEPER_CADDY_HTTP_PORT: "8080" });
  // The policies, http_port and the server's automatic HTTPS (off in the test Caddy) differ, and the routes
  // lack the HTTPS redirect: four changes.
  assert.equal(await writesToCaddy(first.call), 4);
  assert.deepEqual(await readConfig(caddy, "apps/tls/automation/policies"), [
    { subjects: ["other.issuance.test"], issuers: [{ module: "internal" }] },
    { "@id": ISSUANCE_POLICY_ID, issuers: [{ module: "internal" }] },
  ]);
  assert.equal(await readConfig(caddy, "apps/http/http_port"), 8080);
  assert.deepEqual(await readConfig(caddy, "apps/http/servers/srv0/automatic_https"), {});

  // The same settings again: nothing to change.
  const second = await buildTestApp(t, { ...env, HOSTKEEPER_CADDY_HTTP_PORT: "8080" });
  assert.equal(await writesToCaddy(second.call), 0);

  // One setting changed: one change.
  const third = await buildTestApp(t, { ...env, HOSTKEEPER_CADDY_HTTP_PORT: "8081" });
  assert.equal(await writesToCaddy(third.call), 1);
  assert.equal(await readConfig(caddy, "apps/http/http_port"), 8081);
});

test("a Caddy of the user's own is left as its owner set it when no setting asks otherwise: byte for byte through the agent's start", {
  timeout: 60_000,
}, async (t) => {
  // Automatic HTTPS turned off by hand, a TLS app of the owner's (a named policy and a catch-all one), no
  // grace_period: each differs from what the agent's defaults would write.
  const httpPort = await freePort();
  const owners = {
    http: {
      servers: {
        srv0: { listen: [`127.0.0.1:${httpPort}`], automatic_https: { disable: true }, routes: [] },
      },
    },
    tls: {
      automation: {
        policies: [
          {
            subjects: ["named.issuance.test"],
            issuers: [{ module: "acme", email: "named@issuance.example" }],
          },
          { issuers: [{ module: "acme", email: "owner@issuance.example" }] },
        ],
      },
    },
  };
  const caddy = await startCaddy(t, { httpPort, extra: { apps: owners } });
  const before = (await caddy.admin.read("/config/")).text;
  // The test helper sets an issuer; empty is unset, as on a host that never set one.
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_TLS_ISSUER: "",
  });
  assert.equal(await writesToCaddy(call), 0);
  assert.equal((await caddy.admin.read("/config/")).text, before);

  // A setting that asks: the agent applies it, and what follows from it (automatic HTTPS on, the catch-all
  // policy the agent's place, the HTTPS redirect), and still leaves grace_period alone.
  const asked = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_TLS_ISSUER: "acme",
  });
  assert.equal(await writesToCaddy(asked.call), 3);
  assert.deepEqual(await readConfig(caddy, "apps/http/servers/srv0/automatic_https"), {});
  assert.deepEqual(await readConfig(caddy, "apps/tls/automation/policies"), [
    owners.tls.automation.policies[0],
  ]);
  assert.equal(await readConfig(caddy, "apps/http/grace_period"), null);
});

test("a Caddy as an earlier version of the agent left it gets install_trust false at start, as one change", {
  timeout: 60_000,
}, async (t) => {
  // No local CA setting yet, and nothing it could issue for: its one server has automatic HTTPS off and no
  // routes. The agent's settings are otherwise those it already holds (issuer off, grace_period 10s).
  const caddy = await startCaddy(t, { extra: { apps: { pki: undefined } } });
  assert.equal(await readConfig(caddy, "apps/pki"), null);
  const { call } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  assert.equal(await writesToCaddy(call), 1);
  assert.deepEqual(await readConfig(caddy, "apps/pki"), {
    certificate_authorities: { local: { install_trust: false } },
  });
});
