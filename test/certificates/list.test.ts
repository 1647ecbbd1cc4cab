import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { waitFor } from "../helpers/wait.js";
import { DAY, type Entry, peerCertificate, storeAsCaddy, testCa, tlsSetup } from "./support.js";

const valid = (e: Entry | undefined) => (e?.status === "valid" ? e : undefined);

/** The entry agrees with what a TLS client asking for `host` gets from Caddy. */
async function assertServed(tlsPort: number, host: string, e: Entry) {
  const peer = await peerCertificate(tlsPort, host);
  assert.equal(peer.serialNumber.toUpperCase(), e.serial, `${host}: serial`);
  assert.equal(new Date(peer.valid_to).toISOString(), e.not_after, `${host}: not_after`);
  assert.equal(new Date(peer.valid_from).toISOString(), e.not_before, `${host}: not_before`);
  assert.ok(
    e.issuer?.includes(`CN=${peer.issuer.CN}`),
    `${host}: issuer ${e.issuer} names ${peer.issuer.CN}`,
  );
}

describe("GET /v1/proxy/certificates", () => {
  test("hosts issued by Caddy's internal CA are listed as a TLS client gets them", async (t) => {
    const s = await tlsSetup(t);
    await s.addRoute("a.test", { redirect_from: ["www.a.test"] });
    await s.addRoute("b.test");
    for (const host of ["a.test", "www.a.test", "b.test"]) {
      const e = await waitFor(`${host} to be issued`, async () => valid(await s.entry(host)), 30_000);
      assert.equal(e.source, "internal");
      assert.deepEqual(e.names, [host]);
      assert.equal(e.error, null);
      assert.equal(e.name, null);
      await assertServed(s.tlsPort, host, e);
    }
    const hosts = (await s.list()).map((e) => e.host);
    assert.deepEqual(hosts, ["a.test", "b.test", "www.a.test"]);
  });

  test("a host whose issuance fails is missing, with Caddy's error from its log", async (t) => {
    const s = await tlsSetup(t, ["fail.test"]);
    await s.addRoute("fail.test");
    const e = await waitFor(
      "Caddy's error for fail.test",
      async () => {
        const x = await s.entry("fail.test");
        return x?.error ? x : undefined;
      },
      30_000,
    );
    assert.equal(e.status, "missing");
    assert.equal(e.source, null);
    assert.equal(e.serial, null);
    assert.deepEqual(e.names, []);
    assert.match(e.error?.message ?? "", /127\.0\.0\.1|refused|directory/);
    assert.ok(e.error?.at && !Number.isNaN(Date.parse(e.error.at)));
  });

  test("certificates in Caddy's storage that expire soon or expired show expiring and expired", async (t) => {
    const s = await tlsSetup(t, ["soon.test", "old.test", "fresh.test"]);
    const ca = testCa(t);
    const now = Date.now();
    // 22 days of life, 2 left: under both 14 days and a third of its life.
    const soon = ca.issue(["soon.test"], new Date(now - 20 * DAY), new Date(now + 2 * DAY));
    const old = ca.issue(["old.test"], new Date("2020-01-01T00:00:00Z"), new Date("2020-01-02T00:00:00Z"));
    // 3 days of life, 2 left: less than 14 days, but more than a third of its life: Caddy would not renew yet.
    const fresh = ca.issue(["fresh.test"], new Date(now - DAY), new Date(now + 2 * DAY));
    storeAsCaddy(s.deadIssuerDir, "soon.test", soon);
    storeAsCaddy(s.deadIssuerDir, "old.test", old);
    storeAsCaddy(s.deadIssuerDir, "fresh.test", fresh);
    await s.addRoute("soon.test");
    await s.addRoute("old.test");
    await s.addRoute("fresh.test");
    const byHost = new Map((await s.list()).map((e) => [e.host, e]));
    const e = byHost.get("soon.test");
    assert.equal(e?.status, "expiring");
    assert.equal(e?.source, "acme");
    assert.equal(byHost.get("old.test")?.status, "expired");
    assert.equal(byHost.get("old.test")?.not_after, "2020-01-02T00:00:00.000Z");
    assert.equal(byHost.get("fresh.test")?.status, "valid");
    // Caddy serves the expiring certificate (its renewal cannot happen), as the list says.
    if (e) await assertServed(s.tlsPort, "soon.test", e);
  });

  test("the metrics show each certificate's expiry and the count by status", async (t) => {
    const s = await tlsSetup(t, ["fail.test"]);
    await s.addRoute("m.test");
    await s.addRoute("fail.test");
    const e = await waitFor("m.test to be issued", async () => valid(await s.entry("m.test")), 30_000);
    const r = await s.call({ method: "GET", url: "/metrics" });
    assert.equal(r.statusCode, 200);
    const expiry = Date.parse(e.not_after ?? "") / 1000;
    assert.match(
      r.body,
      new RegExp(
        `hostkeeper_certificate_expiry_timestamp_seconds\\{name="m.test",source="internal"\\} ${expiry}`,
      ),
    );
    assert.match(r.body, /hostkeeper_certificates\{status="valid"\} 1/);
    assert.match(r.body, /hostkeeper_certificates\{status="missing"\} 1/);
  });
});
