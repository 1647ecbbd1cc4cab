import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chownSync,
  existsSync,
  lchownSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import { buildTestApp } from "../helpers/app.js";
import { capturedLogger } from "../helpers/logs.js";
import { waitFor } from "../helpers/wait.js";
import { DAY, testCa, tlsSetup } from "./support.js";

/*
 * Caddy's storage is Caddy's user's (hostkeeper-caddy for the packaged Caddy): what that user can put there,
 * planted by hand, must never make the agent, running as root, read, write, delete or give away a file
 * outside it, nor hang on it.
 */

const CADDY = 65534;
const OTHER = 65533;

/** A folder of root's holding what must survive: where a planted link would aim. */
function victims(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-victims-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "authorized_keys"), "ssh-ed25519 AAAA root\n", { mode: 0o600 });
  writeFileSync(join(dir, "sshd_config"), "PermitRootLogin no\n", { mode: 0o644 });
  return dir;
}

/** The agent on a Caddy whose storage is a folder of Caddy's user, and what it warns of. */
async function setup(t: TestContext) {
  const root = mkdtempSync(join(tmpdir(), "hk-storage-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  chownSync(root, CADDY, CADDY);
  const { log, lines } = capturedLogger("warn");
  const s = await tlsSetup(t, [], { storageRoot: root, logger: log });
  const ca = testCa(t);
  const cert = (name: string) =>
    ca.issue([name], new Date(Date.now() - DAY), new Date(Date.now() + 10 * DAY));
  const put = (name: string, host: string) => {
    const c = cert(host);
    return s.call({
      method: "PUT",
      url: `/v1/proxy/certificates/${name}`,
      payload: { certificate_pem: c.cert, key_pem: c.key },
    });
  };
  /** A route for `host`, once Caddy's internal CA issued for it (nothing Caddy writes then races the test). */
  const issued = async (host: string) => {
    await s.addRoute(host);
    await waitFor(`${host} to be issued`, async () =>
      (await s.entry(host))?.status === "valid" ? true : undefined,
    );
  };
  return { ...s, root, cert, put, issued, warnings: lines };
}

const unsafe = (r: { statusCode: number; body: string }, reason: RegExp) => {
  assert.equal(r.statusCode, 500, r.body);
  const body = JSON.parse(r.body) as { code: string; detail: string };
  assert.equal(body.code, "unsafe_file");
  assert.match(body.detail, reason);
};

const untouched = (dir: string) => {
  assert.deepEqual(readdirSync(dir).sort(), ["authorized_keys", "sshd_config"]);
  assert.equal(readFileSync(join(dir, "authorized_keys"), "utf8"), "ssh-ed25519 AAAA root\n");
};

describe("planted in Caddy's storage", { skip: process.getuid?.() === 0 ? false : "needs root" }, () => {
  test("a link at the copies' folder: a start deletes nothing where it points, a PUT writes nothing there", async (t) => {
    const s = await setup(t);
    const target = victims(t);
    const copies = join(s.root, "hostkeeper-custom");
    symlinkSync(target, copies);
    lchownSync(copies, CADDY, CADDY);
    // The start's conformance runs with no custom certificate at all.
    await s.app.close();
    const { log, lines } = capturedLogger("warn");
    const again = await buildTestApp(t, s.env, { dataDir: s.config.agent.dataDir, logger: log });
    await again.app.services.certificates.whenConformed();
    untouched(target);
    assert.ok(
      lines.some((l) => l.includes("hostkeeper-custom is a link")),
      lines.join("\n"),
    );
    const c = s.cert("victim.test");
    const r = await again.call({
      method: "PUT",
      url: "/v1/proxy/certificates/victim",
      payload: { certificate_pem: c.cert, key_pem: c.key },
    });
    unsafe(r, /is a link/);
    untouched(target);
  });

  test("a link at the copies' folder set up by a first certificate: removal and replacement stay inside", async (t) => {
    const s = await setup(t);
    assert.equal((await s.put("one", "one.test")).statusCode, 201);
    const copies = join(s.root, "hostkeeper-custom");
    rmSync(copies, { recursive: true });
    const target = victims(t);
    symlinkSync(target, copies);
    unsafe(await s.put("one", "one.test"), /is a link/);
    unsafe(await s.call({ method: "DELETE", url: "/v1/proxy/certificates/one" }), /is a link/);
    untouched(target);
  });

  test("a link at a certificate Caddy stores, or at its folders: the list refuses, and warns", async (t) => {
    const s = await setup(t);
    await s.issued("stored.test");
    const issuer = join(s.root, "certificates", "local");
    const file = join(issuer, "stored.test", "stored.test.crt");
    const secret = join(victims(t), "root.crt");
    writeFileSync(secret, s.cert("root-only.test").cert, { mode: 0o600 });
    rmSync(file);
    symlinkSync(secret, file);
    unsafe(await s.call({ method: "GET", url: "/v1/proxy/certificates" }), /stored\.test\.crt is a link/);
    assert.ok(
      s.warnings.some((l) => l.includes("stored.test.crt is a link")),
      s.warnings.join("\n"),
    );
    // A link at the host's folder, and at the issuer's.
    rmSync(join(issuer, "stored.test"), { recursive: true });
    symlinkSync(join(secret, ".."), join(issuer, "stored.test"));
    unsafe(await s.call({ method: "GET", url: "/v1/proxy/certificates" }), /stored\.test is a link/);
    rmSync(join(issuer, "stored.test"));
    rmSync(issuer, { recursive: true });
    symlinkSync(join(secret, ".."), issuer);
    unsafe(await s.call({ method: "GET", url: "/v1/proxy/certificates" }), /local is a link/);
  });

  test("a FIFO or another user's file as a certificate Caddy stores: the list refuses at once", async (t) => {
    const s = await setup(t);
    await s.issued("fifo.test");
    await s.issued("theirs.test");
    const issuer = join(s.root, "certificates", "local");
    rmSync(join(issuer, "fifo.test", "fifo.test.crt"));
    execFileSync("mkfifo", [join(issuer, "fifo.test", "fifo.test.crt")]);
    unsafe(await s.call({ method: "GET", url: "/v1/proxy/certificates" }), /is not a regular file/);
    rmSync(join(issuer, "fifo.test"), { recursive: true });
    chownSync(join(issuer, "theirs.test", "theirs.test.crt"), OTHER, OTHER);
    unsafe(await s.call({ method: "GET", url: "/v1/proxy/certificates" }), /belongs to uid 65533/);
  });

  test("a storage Caddy's config moves into root's folders gets no copy while Caddy's user is known", async (t) => {
    // HOSTKEEPER_CADDY_DATA_DIR names Caddy's user (its owner); Caddy's config, which a compromised Caddy
    // writes itself, points its storage at a folder of root's (as /usr/local/share/ca-certificates).
    const state = mkdtempSync(join(tmpdir(), "hk-caddy-data-"));
    t.after(() => rmSync(state, { recursive: true, force: true }));
    chownSync(state, CADDY, CADDY);
    const trusted = mkdtempSync(join(tmpdir(), "hk-ca-certificates-"));
    t.after(() => rmSync(trusted, { recursive: true, force: true }));
    const s = await tlsSetup(t, [], { storageRoot: trusted, caddyDataDir: state });
    const ca = testCa(t);
    const c = ca.issue(["root.test"], new Date(Date.now() - DAY), new Date(Date.now() + 10 * DAY));
    const r = await s.call({
      method: "PUT",
      url: "/v1/proxy/certificates/root",
      payload: { certificate_pem: c.cert, key_pem: c.key },
    });
    unsafe(r, /belongs to uid 0, not to uid 65534/);
    assert.ok(!existsSync(join(trusted, "hostkeeper-custom")));
  });
});
