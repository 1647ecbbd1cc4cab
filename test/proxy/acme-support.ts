import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../../support/loopback.js";
import { type Entry, peerCertificate } from "../certificates/support.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { proxyExchange, sentAgainOnReset, startUpstream } from "../helpers/http.js";
import { startPebble } from "../helpers/pebble.js";

/** The certificate a TLS client asking 127.0.0.1:`port` for `servername` gets. */
export const served = async (port: number, servername: string) =>
  new X509Certificate((await peerCertificate(port, servername)).raw);

/**
 * The agent (issuer acme, pebble's directory) on a Caddy listening on two loopback ports; pebble validates
 * HTTP-01 on the first and TLS-ALPN-01 on the second, or on a port nothing listens on for the challenge
 * `closed`, so that only the other can pass.
 */
export async function acmeSetup(
  t: Parameters<typeof startCaddy>[0],
  closed: "http-01" | "tls-alpn-01",
  env: Record<string, string> = {},
) {
  const [httpPort, tlsPort, nowhere] = [await freePort(), await freePort(), await freePort()];
  const pebble = await startPebble(t, {
    httpPort: closed === "http-01" ? nowhere : httpPort,
    tlsPort: closed === "tls-alpn-01" ? nowhere : tlsPort,
  });
  // Caddy logs JSON to a file, where the certificates list reads its failures to get a certificate.
  const logDir = mkdtempSync(join(tmpdir(), "hk-acme-log-"));
  t.after(() => rmSync(logDir, { recursive: true, force: true }));
  const log = join(logDir, "caddy.log");
  const caddy = await startCaddy(t, {
    withServer: false,
    extra: {
      logging: {
        logs: { default: { writer: { output: "file", filename: log }, encoder: { format: "json" } } },
      },
    },
  });
  const dataDir = join(caddy.dir, "data");
  mkdirSync(join(dataDir, "caddy"), { recursive: true });
  const h = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${httpPort},127.0.0.1:${tlsPort}`,
    HOSTKEEPER_CADDY_HTTP_PORT: String(httpPort),
    HOSTKEEPER_CADDY_HTTPS_PORT: String(tlsPort),
    HOSTKEEPER_CADDY_DATA_DIR: dataDir,
    HOSTKEEPER_TLS_ISSUER: "acme",
    HOSTKEEPER_ACME_CA: pebble.directory,
    HOSTKEEPER_ACME_CA_ROOT: pebble.listenerCa,
    HOSTKEEPER_ACME_EMAIL: "ops@acme.example",
    ...env,
  });
  const up = await startUpstream(t, "acme-upstream");
  const addRoute = async (domain: string, extra: Record<string, unknown> = {}) => {
    const r = await h.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: { domain, upstreams: [{ dial: `127.0.0.1:${up.port}` }], ...extra },
    });
    assert.equal(r.statusCode, 201, r.body);
  };
  const entry = async (host: string) => {
    const r = await h.call({ method: "GET", url: "/v1/proxy/certificates" });
    return (JSON.parse(r.body) as { certificates: Entry[] }).certificates.find((e) => e.host === host);
  };
  /** A plain-HTTP request for `host` answers 308 to its HTTPS port, path and query kept. */
  const redirects = async (host: string) => {
    const r = await sentAgainOnReset(() => proxyExchange(httpPort, host, { path: "/p?q=1" }));
    assert.equal(r.status, 308, host);
    assert.equal(r.headers.location, `https://${host}:${tlsPort}/p?q=1`);
  };
  return { ...h, caddy, log, pebble, httpPort, tlsPort, addRoute, entry, redirects };
}
