import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { test } from "node:test";
import { waitFor } from "../helpers/wait.js";
import { acmeSetup, served } from "./acme-support.js";

// Real certificates from a real ACME server: Debian's pebble on loopback, its fake DNS sending every name
// to 127.0.0.1, Caddy trusting pebble's listener through HOSTKEEPER_ACME_CA_ROOT (never the host's stores).

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
