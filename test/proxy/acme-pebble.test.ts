import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { freePort } from "../../support/loopback.js";
import { type Entry, peerCertificate } from "../certificates/support.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { proxyExchange, sentAgainOnReset, startUpstream } from "../helpers/http.js";
import { startPebble } from "../helpers/pebble.js";
import { waitFor } from "../helpers/wait.js";

// Real certificates from a real ACME server: Debian's pebble on loopback, its fake DNS sending every name
// to 127.0.0.1, Caddy trusting pebble's listener through HOSTKEEPER_ACME_CA_ROOT (never the host's stores).

/** The certificate a TLS client asking 127.0.0.1:`port` for `servername` gets. */
const served = async (port: number, servername: string) =>
  new X509Certificate((await peerCertificate(port, servername)).raw);

/**
 * The agent (issuer acme, pebble's directory) on a Caddy listening on two loopback ports; pebble validates
 * HTTP-01 on the first and TLS-ALPN-01 on the second, or on a port nothing listens on for the challenge
 * `closed`, so that only the other can pass.
 */
async function acmeSetup(t: Parameters<typeof startCaddy>[0], closed: "http-01" | "tls-alpn-01") {
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
  });
  const up = await startUpstream(t, "acme-upstream");
  const addRoute = async (domain: string) => {
    const r = await h.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: { domain, upstreams: [{ dial: `127.0.0.1:${up.port}` }] },
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
  return { ...h, pebble, tlsPort, addRoute, entry, redirects };
}

for (const [challenge, closed] of [
  ["HTTP-01", "tls-alpn-01"],
  ["TLS-ALPN-01", "http-01"],
] as const)
  test(`a route's host gets a certificate from pebble by ${challenge}, served by SNI and listed valid with pebble's issuer and serial; plain HTTP redirects throughout`, {
    timeout: 90_000,
  }, async (t) => {
    const s = await acmeSetup(t, closed);
    await s.addRoute("app.acme.test");
    // The redirect holds while the challenge passes: Caddy answers HTTP-01 before any route.
    await s.redirects("app.acme.test");
    const cert = await waitFor(
      "pebble's certificate served for app.acme.test",
      async () => {
        const c = await served(s.tlsPort, "app.acme.test").catch(() => undefined);
        return c?.issuer.includes("Pebble Intermediate CA") ? c : undefined;
      },
      60_000,
    );
    assert.equal(cert.subjectAltName, "DNS:app.acme.test");
    // Signed by pebble's chain: its intermediate, issued from the root of this pebble's start.
    const root = new X509Certificate(await s.pebble.issuingRoot());
    assert.match(root.subject, /Pebble Root CA/);
    const listed = await waitFor("the list to say valid", async () => {
      const e = await s.entry("app.acme.test");
      return e?.status === "valid" ? e : undefined;
    });
    assert.equal(listed.source, "acme");
    assert.match(listed.issuer ?? "", /Pebble Intermediate CA/);
    assert.equal(listed.serial, cert.serialNumber.toUpperCase());
    await s.redirects("app.acme.test");
  });

test("a host pebble cannot validate is missing, with pebble's error text", { timeout: 90_000 }, async (t) => {
  const s = await acmeSetup(t, "tls-alpn-01");
  // The fake DNS sends it where nothing answers: neither challenge can pass.
  await s.pebble.resolve("refused.acme.test", "127.0.0.2");
  await s.addRoute("refused.acme.test");
  const e = await waitFor(
    "pebble's refusal in the list",
    async () => {
      const got = await s.entry("refused.acme.test");
      return got?.error ? got : undefined;
    },
    60_000,
  );
  assert.equal(e.status, "missing");
  assert.equal(e.source, null);
  // Pebble's words, as Caddy logged them: the ACME problem, and the address its validation could not reach
  // (by HTTP-01 or TLS-ALPN-01, whichever Caddy tried last).
  assert.match(e.error?.message ?? "", /urn:ietf:params:acme:error:\w+ - .*127\.0\.0\.2:\d+/);
});
