import assert from "node:assert/strict";
import { appendFileSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { storageKey } from "../../src/certificates/caddy-storage.js";
import { acmeIssuerKey, covers, issuerKeysOf, policyFor, statusOf } from "../../src/certificates/entries.js";
import { ObtainErrorLog } from "../../src/certificates/obtain-errors.js";
import { checkCustomCertificate } from "../../src/certificates/pem.js";
import { InvalidInputError } from "../../src/util/invalid-input.js";
import { DAY, testCa } from "./support.js";

const HOUR = 3_600_000;
const facts = (notBefore: number, notAfter: number) => ({
  names: ["x.test"],
  issuer: "CN=x",
  serial: "01",
  notBefore: new Date(notBefore),
  notAfter: new Date(notAfter),
});

describe("status", () => {
  const now = Date.parse("2026-11-26T00:00:00Z");
  const warn = 14 * DAY;
  test("a 90-day certificate is expiring once less than both 14 days and 30 days are left", () => {
    assert.equal(statusOf(facts(now - 80 * DAY, now + 10 * DAY), now, warn), "expiring");
    assert.equal(statusOf(facts(now - 70 * DAY, now + 20 * DAY), now, warn), "valid");
  });
  test("a healthy 6-day or 12-hour certificate is valid until a third of its life is left", () => {
    assert.equal(statusOf(facts(now - 2 * DAY, now + 4 * DAY), now, warn), "valid");
    assert.equal(statusOf(facts(now - 5 * DAY, now + 1 * DAY), now, warn), "expiring");
    assert.equal(statusOf(facts(now - 6 * HOUR, now + 6 * HOUR), now, warn), "valid");
    assert.equal(statusOf(facts(now - 10 * HOUR, now + 2 * HOUR), now, warn), "expiring");
  });
  test("past not_after it is expired", () => {
    assert.equal(statusOf(facts(now - 2 * DAY, now), now, warn), "expired");
  });
});

describe("names", () => {
  test("a wildcard covers exactly one label", () => {
    assert.ok(covers("*.example.com", "a.example.com"));
    assert.ok(!covers("*.example.com", "example.com"));
    assert.ok(!covers("*.example.com", "a.b.example.com"));
    assert.ok(covers("a.example.com", "a.example.com"));
  });
  test("storage keys and ACME issuer keys are spelled as certmagic spells them", () => {
    assert.equal(storageKey("*.Example.com"), "wildcard_.example.com");
    assert.equal(storageKey("127.0.0.1:8443-directory"), "127.0.0.1-8443-directory");
    assert.equal(
      acmeIssuerKey("https://acme-v02.api.letsencrypt.org/directory"),
      "acme-v02.api.letsencrypt.org-directory",
    );
    assert.equal(acmeIssuerKey("https://ca.test:8443/acme/dir/"), "ca.test:8443-acme-dir");
  });
  test("the issuers of the first automation policy that covers the host count", () => {
    const policies = [
      { subjects: ["*.a.test"], issuers: [{ module: "acme", ca: "https://ca.test/dir" }] },
      { issuers: [{ module: "internal" }] },
      { subjects: ["b.test"], issuers: [{ module: "acme" }] },
    ];
    const keys = (host: string, p: typeof policies) => issuerKeysOf(policyFor(host, p));
    assert.deepEqual(keys("x.a.test", policies), ["ca.test-dir"]);
    assert.deepEqual(keys("b.test", policies), ["local"]);
    assert.equal(keys("b.test", []), undefined);
    assert.equal(keys("b.test", [{ issuers: [{ module: "zerossl" }] }]), undefined);
  });
});

describe("Caddy's log of failures", () => {
  const line = (logger: string, msg: string, identifier: string, error?: string) =>
    `${JSON.stringify({ level: "error", ts: "2026-11-26T00:00:00Z", logger, msg, identifier, ...(error ? { error } : {}) })}\n`;
  const FAILED = "could not get certificate from issuer";

  test("keeps the last failure per name, cleared by a success, read on as the log grows and rolls", (t) => {
    const dir = mkdtempSync(join(tmpdir(), "hk-obtainlog-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, "caddy.log");
    writeFileSync(
      path,
      line("tls.obtain", FAILED, "a.test", "first") + line("http.log", FAILED, "b.test", "x"),
    );
    const log = new ObtainErrorLog();
    assert.equal(log.read(path).get("a.test")?.message, "first");
    assert.equal(log.read(path).has("b.test"), false, "another logger's line is not Caddy's obtain");
    // Half a line: read once it is whole.
    const next = line("tls.renew", FAILED, "a.test", "second");
    appendFileSync(path, next.slice(0, 20));
    assert.equal(log.read(path).get("a.test")?.message, "first");
    appendFileSync(path, next.slice(20));
    assert.equal(log.read(path).get("a.test")?.message, "second");
    appendFileSync(path, line("tls.obtain", "certificate obtained successfully", "a.test"));
    assert.equal(log.read(path).has("a.test"), false);
    // Caddy rolls the log: the new file is read from its start, what was found before is kept.
    appendFileSync(path, line("tls.obtain", FAILED, "c.test", "old file"));
    log.read(path);
    renameSync(path, join(dir, "caddy-1.log"));
    writeFileSync(path, line("tls.obtain", FAILED, "d.test", "new file"));
    const errors = log.read(path);
    assert.equal(errors.get("c.test")?.message, "old file");
    assert.equal(errors.get("d.test")?.message, "new file");
    assert.equal(errors.get("d.test")?.at, "2026-11-26T00:00:00.000Z");
  });

  test("reads only the end of a large log, and no line cut in half", (t) => {
    const dir = mkdtempSync(join(tmpdir(), "hk-obtainlog-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, "caddy.log");
    const early = line("tls.obtain", FAILED, "early.test", "e");
    writeFileSync(path, `${early}${"x".repeat(5000)}\n${line("tls.obtain", FAILED, "late.test", "l")}`);
    const errors = new ObtainErrorLog(2000).read(path);
    assert.equal(errors.has("early.test"), false);
    assert.equal(errors.get("late.test")?.message, "l");
  });
});

describe("custom certificate checks", () => {
  test("a chain out of order is refused; in order it is stored leaf first with the key as PKCS #8", (t) => {
    const ca = testCa(t);
    const c = ca.issue(["o.test"], new Date(Date.now() - DAY), new Date(Date.now() + DAY));
    assert.throws(
      () => checkCustomCertificate(ca.caPem + c.cert, c.key, new Date()),
      (err: unknown) => err instanceof InvalidInputError && /did not issue|not the key/.test(err.message),
    );
    const ok = checkCustomCertificate(c.cert + ca.caPem, c.key, new Date());
    assert.deepEqual(ok.facts.names, ["o.test"]);
    assert.match(ok.keyPem, /^-----BEGIN PRIVATE KEY-----/);
    assert.equal(ok.certificatePem.match(/BEGIN CERTIFICATE/g)?.length, 2);
  });
});
