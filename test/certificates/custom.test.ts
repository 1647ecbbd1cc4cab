import assert from "node:assert/strict";
import {
  chownSync,
  existsSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { buildTestApp } from "../helpers/app.js";
import { capturedLogger } from "../helpers/logs.js";
import { waitFor } from "../helpers/wait.js";
import { DAY, type Entry, peerCertificate, testCa, tlsSetup } from "./support.js";

const put = (s: Awaited<ReturnType<typeof tlsSetup>>, name: string, payload: unknown) =>
  s.call({ method: "PUT", url: `/v1/proxy/certificates/${name}`, payload });

/** The serial a TLS client asking for `host` gets, as the list spells serials. */
const servedSerial = async (port: number, host: string) =>
  (await peerCertificate(port, host)).serialNumber.toUpperCase();

/** Where the agent puts Caddy's copies (beside Caddy's own `certificates` folder). */
const copiesDir = (dataDir: string) => join(dataDir, "caddy", "hostkeeper-custom");

describe("custom certificates", () => {
  test("put, served for its names instead of the issued one, replaced, deleted and issued again", async (t) => {
    const s = await tlsSetup(t);
    await s.addRoute("c.test", { redirect_from: ["www.c.test"] });
    const issued = await waitFor(
      "c.test to be issued",
      async () => ((await s.entry("c.test"))?.status === "valid" ? s.entry("c.test") : undefined),
      30_000,
    );
    assert.equal(issued?.source, "internal");
    const ca = testCa(t);
    const now = Date.now();
    const first = ca.issue(["c.test", "*.c.test"], new Date(now - DAY), new Date(now + 20 * DAY));
    const created = await put(s, "c-test", { certificate_pem: first.cert + ca.caPem, key_pem: first.key });
    assert.equal(created.statusCode, 201, created.body);
    const entry = JSON.parse(created.body) as Entry;
    assert.equal(entry.name, "c-test");
    assert.equal(entry.host, null);
    assert.equal(entry.source, "custom");
    assert.deepEqual(entry.names, ["c.test", "*.c.test"]);
    assert.equal(entry.status, "valid");
    for (const host of ["c.test", "www.c.test"]) {
      assert.equal(
        await servedSerial(s.tlsPort, host),
        entry.serial,
        `${host} is served the custom certificate`,
      );
      const listed = await s.entry(host);
      assert.equal(listed?.source, "custom");
      assert.equal(listed?.name, "c-test");
      assert.equal(listed?.serial, entry.serial);
    }
    const agentFile = join(s.config.agent.dataDir, "certificates", "c-test.pem");
    assert.equal(statSync(agentFile).mode & 0o777, 0o600);
    for (const f of readdirSync(copiesDir(s.dataDir)))
      assert.equal(statSync(join(copiesDir(s.dataDir), f)).mode & 0o777, 0o600, f);

    const second = ca.issue(["c.test"], new Date(now - DAY), new Date(now + 30 * DAY));
    const replaced = await put(s, "c-test", { certificate_pem: second.cert, key_pem: second.key });
    assert.equal(replaced.statusCode, 200, replaced.body);
    const secondSerial = (JSON.parse(replaced.body) as Entry).serial;
    assert.notEqual(secondSerial, entry.serial);
    assert.equal(await servedSerial(s.tlsPort, "c.test"), secondSerial);
    assert.equal(readdirSync(copiesDir(s.dataDir)).length, 2, "the replaced certificate's copies are gone");
    // www.c.test is no longer covered: back to issuance.
    const www = await waitFor(
      "www.c.test to be issued again",
      async () => ((await s.entry("www.c.test"))?.source === "internal" ? s.entry("www.c.test") : undefined),
      30_000,
    );
    assert.equal(await servedSerial(s.tlsPort, "www.c.test"), www?.serial);

    const deleted = await s.call({ method: "DELETE", url: "/v1/proxy/certificates/c-test" });
    assert.equal(deleted.statusCode, 204);
    assert.deepEqual(readdirSync(copiesDir(s.dataDir)), []);
    const back = await waitFor(
      "c.test to be served by issuance again",
      async () => {
        const e = await s.entry("c.test");
        return e?.source === "internal" && e.status === "valid" ? e : undefined;
      },
      30_000,
    );
    assert.equal(await servedSerial(s.tlsPort, "c.test"), back.serial);
    assert.equal((await s.list()).filter((e) => e.host === null).length, 0);
    assert.equal((await s.call({ method: "DELETE", url: "/v1/proxy/certificates/c-test" })).statusCode, 404);
    assert.equal((await s.call({ method: "GET", url: "/v1/proxy/certificates/c-test" })).statusCode, 404);
  });

  test("bad inputs are refused with 400 naming what is wrong, and nothing is loaded", async (t) => {
    const s = await tlsSetup(t);
    const ca = testCa(t);
    const now = Date.now();
    const one = ca.issue(["bad.test"], new Date(now - DAY), new Date(now + 10 * DAY));
    const two = ca.issue(["bad.test"], new Date(now - DAY), new Date(now + 10 * DAY));
    const expired = ca.issue(
      ["bad.test"],
      new Date("2020-01-01T00:00:00Z"),
      new Date("2020-01-02T00:00:00Z"),
    );
    const fields = async (name: string, payload: unknown) => {
      const r = await put(s, name, payload);
      assert.equal(r.statusCode, 400, r.body);
      return (JSON.parse(r.body) as { errors: { field: string; message: string }[] }).errors;
    };
    const mismatch = await fields("bad", { certificate_pem: one.cert, key_pem: two.key });
    assert.deepEqual(
      mismatch.map((e) => e.field),
      ["body.key_pem"],
    );
    const old = await fields("bad", { certificate_pem: expired.cert, key_pem: expired.key });
    assert.deepEqual(
      old.map((e) => e.field),
      ["body.certificate_pem"],
    );
    assert.match(old[0]?.message ?? "", /expired/);
    const garbage = await fields("bad", { certificate_pem: "hello", key_pem: "world" });
    assert.deepEqual(garbage.map((e) => e.field).sort(), ["body.certificate_pem", "body.key_pem"]);
    const broken = await fields("bad", {
      certificate_pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
      key_pem: one.key,
    });
    assert.deepEqual(
      broken.map((e) => e.field),
      ["body.certificate_pem"],
    );
    const oversize = await fields("bad", {
      certificate_pem: one.cert + "#".repeat(60_000),
      key_pem: one.key + "#".repeat(6_000),
    });
    assert.deepEqual(
      oversize.map((e) => e.field),
      ["body.certificate_pem"],
    );
    assert.match(oversize[0]?.message ?? "", /64 KiB/);
    const tooLong = await fields("bad", { certificate_pem: "#".repeat(70_000), key_pem: one.key });
    assert.deepEqual(
      tooLong.map((e) => e.field),
      ["body.certificate_pem"],
    );
    for (const name of ["Upper", "a..b", "-dash", "x".repeat(65), "a%2Fb", "a b"]) {
      const e = await fields(name, { certificate_pem: one.cert, key_pem: one.key });
      assert.deepEqual(
        e.map((x) => x.field),
        ["params.name"],
        name,
      );
    }
    assert.deepEqual(
      (await s.list()).filter((e) => e.host === null),
      [],
    );
    const loaded = await s.caddy.admin.read("/config/apps/tls/certificates");
    assert.equal(loaded.text.trim(), "null");
  });

  test("the key is never in the agent's log, events, audit trail or Caddy's config", async (t) => {
    const { log, lines } = capturedLogger("trace");
    const s = await tlsSetup(t, [], { logger: log });
    await s.addRoute("k.test");
    const ca = testCa(t);
    const cert = ca.issue(["k.test"], new Date(Date.now() - DAY), new Date(Date.now() + 10 * DAY));
    const r = await put(s, "k-test", { certificate_pem: cert.cert, key_pem: cert.key });
    assert.equal(r.statusCode, 201, r.body);
    assert.equal(await servedSerial(s.tlsPort, "k.test"), (JSON.parse(r.body) as Entry).serial);
    // The key's body as PEM lines, as the agent re-encodes it (PKCS #8), and as it was sent.
    const stored = readFileSync(join(s.config.agent.dataDir, "certificates", "k-test.pem"), "utf8");
    const keyLines = [stored, cert.key]
      .flatMap((pem) =>
        (/-----BEGIN [A-Z ]*PRIVATE KEY-----\n([\s\S]*?)-----END/.exec(pem)?.[1] ?? "").split("\n"),
      )
      .filter((l) => l.length >= 40);
    assert.ok(keyLines.length >= 2);
    const places: Record<string, string> = {
      log: lines.join("\n"),
      events: (await s.call({ method: "GET", url: "/v1/events" })).body,
      audit: (await s.call({ method: "GET", url: "/v1/audit" })).body,
      caddyConfig: (await s.caddy.admin.read("/config/")).text,
    };
    assert.match(places.audit ?? "", /putCertificate/);
    assert.match(places.caddyConfig ?? "", /load_files/);
    assert.doesNotMatch(places.caddyConfig ?? "", /load_pem|PRIVATE KEY/);
    for (const [where, text] of Object.entries(places))
      for (const line of keyLines) assert.ok(!text.includes(line), `the key is in the ${where}`);
  });

  test("an agent started again loads its custom certificates into a Caddy that lost them", async (t) => {
    const s = await tlsSetup(t);
    const ca = testCa(t);
    const cert = ca.issue(["r.test"], new Date(Date.now() - DAY), new Date(Date.now() + 10 * DAY));
    const r = await put(s, "r-test", { certificate_pem: cert.cert, key_pem: cert.key });
    assert.equal(r.statusCode, 201, r.body);
    const serial = (JSON.parse(r.body) as Entry).serial;
    await s.app.close();
    // Caddy starts again from its first config: no routes, no custom certificates.
    await s.caddy.stop();
    await s.caddy.start();
    assert.equal((await s.caddy.admin.read("/config/apps/tls/certificates")).text.trim(), "null");
    const again = await buildTestApp(t, s.env, { dataDir: s.config.agent.dataDir });
    await again.app.services.certificates.whenConformed();
    const created = await again.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: { domain: "r.test", upstreams: [{ dial: "127.0.0.1:9" }] },
    });
    assert.equal(created.statusCode, 201, created.body);
    assert.equal(await servedSerial(s.tlsPort, "r.test"), serial);
    const listed = JSON.parse((await again.call({ method: "GET", url: "/v1/proxy/certificates" })).body) as {
      certificates: Entry[];
    };
    assert.equal(listed.certificates.find((e) => e.host === "r.test")?.serial, serial);
  });
});

describe("where Caddy's storage is", () => {
  test("a file_system storage in Caddy's config is read, and the copies go to its owner, Caddy's user", async (t) => {
    if (process.getuid?.() !== 0) return t.skip("needs root, to hand files to another user");
    const root = mkdtempSync(join(tmpdir(), "hk-storage-"));
    t.after(() => rmSync(root, { recursive: true, force: true }));
    // Caddy's user, as the packaged Caddy's hostkeeper-caddy: not the agent's (root).
    const caddyUser = 65534;
    chownSync(root, caddyUser, caddyUser);
    const s = await tlsSetup(t, [], { storageRoot: root });
    await s.addRoute("st.test");
    const issued = await waitFor(
      "st.test to be issued into the configured storage",
      async () => {
        const e = await s.entry("st.test");
        return e?.status === "valid" ? e : undefined;
      },
      30_000,
    );
    assert.equal(issued.source, "internal");
    assert.ok(existsSync(join(root, "certificates", "local", "st.test", "st.test.crt")));
    const ca = testCa(t);
    const cert = ca.issue(["st.test"], new Date(Date.now() - DAY), new Date(Date.now() + 10 * DAY));
    const r = await put(s, "st-test", { certificate_pem: cert.cert, key_pem: cert.key });
    assert.equal(r.statusCode, 201, r.body);
    assert.equal(await servedSerial(s.tlsPort, "st.test"), (JSON.parse(r.body) as Entry).serial);
    const copies = join(root, "hostkeeper-custom");
    const folder = statSync(copies);
    assert.deepEqual([folder.uid, folder.mode & 0o777], [caddyUser, 0o700]);
    const files = readdirSync(copies);
    assert.equal(files.length, 2);
    for (const f of files) {
      const st = statSync(join(copies, f));
      assert.deepEqual([st.uid, st.gid, st.mode & 0o777], [caddyUser, caddyUser, 0o600], f);
    }
  });

  test("links Caddy's user puts in place of the copies are replaced, never followed by the agent running as root", async (t) => {
    if (process.getuid?.() !== 0) return t.skip("needs root, to hand files to another user");
    const root = mkdtempSync(join(tmpdir(), "hk-storage-"));
    t.after(() => rmSync(root, { recursive: true, force: true }));
    chownSync(root, 65534, 65534);
    const s = await tlsSetup(t, [], { storageRoot: root });
    const ca = testCa(t);
    const cert = ca.issue(["ln.test"], new Date(Date.now() - DAY), new Date(Date.now() + 10 * DAY));
    const r = await put(s, "ln-test", { certificate_pem: cert.cert, key_pem: cert.key });
    assert.equal(r.statusCode, 201, r.body);
    // Caddy's user swaps each copy for a link to a file of root's: what a root agent that follows links
    // would overwrite and give away.
    const copies = join(root, "hostkeeper-custom");
    const victims = mkdtempSync(join(tmpdir(), "hk-victim-"));
    t.after(() => rmSync(victims, { recursive: true, force: true }));
    for (const f of readdirSync(copies)) {
      const victim = join(victims, f);
      writeFileSync(victim, "root's own\n", { mode: 0o644 });
      rmSync(join(copies, f));
      symlinkSync(victim, join(copies, f));
    }
    await s.app.close();
    const again = await buildTestApp(t, s.env, { dataDir: s.config.agent.dataDir });
    await again.app.services.certificates.whenConformed();
    for (const f of readdirSync(victims)) {
      const v = statSync(join(victims, f));
      assert.equal(readFileSync(join(victims, f), "utf8"), "root's own\n", f);
      assert.deepEqual([v.uid, v.mode & 0o777], [0, 0o644], f);
      const copy = lstatSync(join(copies, f));
      assert.ok(copy.isFile(), `${f} is a file again`);
      assert.deepEqual([copy.uid, copy.mode & 0o777], [65534, 0o600], f);
    }
    await again.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: { domain: "ln.test", upstreams: [{ dial: "127.0.0.1:9" }] },
    });
    assert.equal(await servedSerial(s.tlsPort, "ln.test"), (JSON.parse(r.body) as Entry).serial);
  });

  test("with neither a storage in Caddy's config nor HOSTKEEPER_CADDY_DATA_DIR the list says so", async (t) => {
    const s = await tlsSetup(t, [], { storageUnknown: true });
    const r = await s.call({ method: "GET", url: "/v1/proxy/certificates" });
    assert.equal(r.statusCode, 503);
    assert.equal(JSON.parse(r.body).code, "certificate_storage_unknown");
    assert.match(JSON.parse(r.body).detail, /HOSTKEEPER_CADDY_DATA_DIR/);
  });
});
