import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { freePort } from "../../support/loopback.js";
import { hostPackageState } from "../helpers/host-state.js";
import { startUpstream } from "../helpers/http.js";
import { killEmbeddedCaddys, request, startAgent, stopAgent } from "../helpers/serve.js";
import { waitFor } from "../helpers/wait.js";
import { localRoot, servedCertificate, TRUST_STORES } from "./issuance-support.js";

test("the embedded Caddy: install_trust false and the issuer from its first config, the warning where no certificate can be had, another issuer brought in at the next start", {
  timeout: 120_000,
}, async (t) => {
  const trustBefore = hostPackageState(TRUST_STORES);
  const dataDir = mkdtempSync(join(tmpdir(), "hk-issuance-"));
  t.after(async () => {
    await killEmbeddedCaddys(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
  });
  const httpPort = await freePort();
  const httpsPort = await freePort();
  const base = {
    HOSTKEEPER_DATA_DIR: dataDir,
    HOSTKEEPER_TOKEN: "issuance-token-0123456789",
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${httpPort},127.0.0.1:${httpsPort}`,
  };
  const caddyDir = join(dataDir, "caddy");

  // ACME (the default) on two loopback ports, neither of them 80 or 443: no CA can reach a challenge.
  const first = await startAgent(t, base);
  await first.waitForLog(
    `HOSTKEEPER_CADDY_LISTEN 127.0.0.1:${httpPort}, 127.0.0.1:${httpsPort} will serve TLS`,
    10_000,
  );
  const bootstrap = JSON.parse(readFileSync(join(caddyDir, "bootstrap.json"), "utf8"));
  assert.deepEqual(bootstrap.apps.pki, { certificate_authorities: { local: { install_trust: false } } });
  // ACME without an e-mail or a CA: Caddy's own default issuers, no policy.
  assert.equal(bootstrap.apps.tls, undefined);
  assert.deepEqual(bootstrap.apps.http.servers.srv0.listen, base.HOSTKEEPER_CADDY_LISTEN.split(","));
  // Caddy itself says it will not install its root: the setting was in force when its PKI app started.
  await waitFor("Caddy's word on its trust store", () =>
    readFileSync(join(caddyDir, "caddy.log"), "utf8").includes(
      "root certificate trust store installation disabled",
    )
      ? true
      : undefined,
  );
  assert.equal(await stopAgent(first), 0);

  // The next start: the local CA, with these ports as HTTP and HTTPS ports. The running Caddy is adopted
  // and brought in line; nothing to warn about.
  const second = await startAgent(t, {
    ...base,
    HOSTKEEPER_TLS_ISSUER: "internal",
    HOSTKEEPER_CADDY_HTTP_PORT: String(httpPort),
    HOSTKEEPER_CADDY_HTTPS_PORT: String(httpsPort),
  });
  await second.waitForLog("brought Caddy's config in line with the settings", 10_000);
  assert.match(
    second.log(),
    /"fields_updated":\["apps\.tls\.automation\.policies","apps\.http\.http_port","apps\.http\.https_port"\]/,
  );
  assert.doesNotMatch(second.log(), /will serve TLS/);
  // The start line says which listen addresses serve TLS.
  await second.waitForLog('"tls":{', 10_000);
  const startLine = second
    .log()
    .split("\n")
    .find((l) => l.includes('"tls":{'));
  assert.deepEqual(JSON.parse(startLine ?? "{}").tls, {
    issuer: "internal",
    http_port: httpPort,
    https_port: httpsPort,
    caddy_listen_tls: [`127.0.0.1:${httpsPort}`],
  });
  const up = await startUpstream(t, "embedded");
  const created = await request(second.port, "POST", "/v1/proxy/routes", base.HOSTKEEPER_TOKEN, {
    domain: "embedded.issuance.test",
    upstreams: [{ dial: `127.0.0.1:${up.port}` }],
  });
  assert.equal(created.status, 201, created.body);
  const root = await waitFor("Caddy's local CA root", () => localRoot(join(caddyDir, "data")));
  const served = await waitFor("a certificate", () =>
    servedCertificate(httpsPort, "embedded.issuance.test", root),
  );
  assert.equal(served.authorized, true, served.error);
  assert.match(served.issuer, /^Caddy Local Authority/);

  assert.deepEqual(hostPackageState(TRUST_STORES), trustBefore, "the host's trust stores are untouched");
});
