import assert from "node:assert/strict";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, type TestContext, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { buildTestApp } from "../helpers/app.js";
import { buildRpmRepo, createDnfRoot, type RpmSpec } from "../helpers/dnf-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";
import { holdPidFiles, rebootMarker } from "../helpers/processes.js";

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

/**
 * As in the apt tests: labsec a security update; labnewer 1.1 named by the security advisory and a newer
 * 1.2 without one; labhold a security update, held; labreg a bugfix. labkernel 1.1 (no advisory) pulls in
 * `dbus`, a package `dnf needs-restarting -r` counts as needing a reboot when installed after boot.
 * hk-release gives the root its release version, as a distribution's release package does.
 */
const RPMS: RpmSpec[] = [
  { name: "hk-release", version: "9", provides: "system-release(releasever) = 9" },
  ...["labsec", "labnewer", "labhold", "labreg", "labkernel"].map((name) => ({ name, version: "1.0" })),
  { name: "labsec", version: "1.1" },
  { name: "labnewer", version: "1.1" },
  { name: "labnewer", version: "1.2" },
  { name: "labhold", version: "1.1" },
  { name: "labreg", version: "1.1" },
  { name: "labkernel", version: "1.1", requires: "dbus" },
  { name: "dbus", version: "1.0" },
];
const INITIAL = [
  "hk-release",
  ...["labsec", "labnewer", "labhold", "labreg", "labkernel"].map((n) => `${n}-1.0`),
];

let repo: string;
before(async () => {
  repo = await buildRpmRepo({ after: () => {} }, RPMS, [
    {
      id: "HK-SA-2024:0001",
      type: "security",
      packages: [
        { name: "labsec", version: "1.1" },
        { name: "labnewer", version: "1.1" },
        { name: "labhold", version: "1.1" },
      ],
    },
    { id: "HK-BA-2024:0002", type: "bugfix", packages: [{ name: "labreg", version: "1.1" }] },
  ]);
});
test.after(() => rmSync(repo, { recursive: true, force: true }));

async function setup(t: TestContext, env: Record<string, string> = {}, repoDir = repo) {
  const root = await createDnfRoot(t, repoDir, repoDir === repo ? INITIAL : []);
  const dir = mkdtempSync(join(tmpdir(), "hk-reboot-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const reboot = rebootMarker(dir);
  const app = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
    HOSTKEEPER_PACKAGE_MANAGER: "dnf",
    HOSTKEEPER_DNF_INSTALLROOT: root.root,
    HOSTKEEPER_REBOOT_COMMAND: reboot.command,
    HOSTKEEPER_REBOOT_DELAY_MS: "300",
    HOSTKEEPER_HOLD_PACKAGES: "labhold",
    // The scan of the host's processes would list whatever runs there: restart-scan.test.ts tests the field.
    HOSTKEEPER_SERVICES_RESTART_COMMAND: "none",
    ...env,
  });
  return { root, reboot, ...app };
}

test("dnf: check-updates classifies by security advisory, with the advisory's version", async (t) => {
  const { call } = await setup(t);
  const r = await call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  assert.equal(body.package_manager, "dnf");
  assert.deepEqual([...body.packages].sort(), ["labhold", "labkernel", "labnewer", "labreg", "labsec"]);
  assert.equal(body.security_updates, 3);
  assert.equal(body.regular_updates, 2);
  assert.equal(body.updates_available, true);
  assert.equal(body.reboot_required, false);
  const summary = Object.fromEntries(
    body.updates.map((u: Record<string, unknown>) => [
      u.name,
      [u.current_version, u.new_version, u.security, u.security_version, u.held],
    ]),
  );
  assert.deepEqual(summary, {
    labsec: ["1.0-1", "1.1-1", true, "1.1-1", false],
    labnewer: ["1.0-1", "1.2-1", true, "1.1-1", false],
    labhold: ["1.0-1", "1.1-1", true, "1.1-1", true],
    labreg: ["1.0-1", "1.1-1", false, null, false],
    labkernel: ["1.0-1", "1.1-1", false, null, false],
  });
});

test("dnf: a security apply installs the advisory versions only and keeps held packages", async (t) => {
  const { call, root, reboot } = await setup(t);
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security", auto_reboot: true },
  });
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  assert.deepEqual(
    body.upgraded
      .map((p: { name: string; from: string; to: string }) => `${p.name} ${p.from} ${p.to}`)
      .sort(),
    ["labnewer 1.0-1 1.1-1", "labsec 1.0-1 1.1-1"],
  );
  assert.deepEqual(body.held_back, [
    { name: "labhold", arch: "noarch", current_version: "1.0-1", available_version: "1.1-1", reason: "hold" },
  ]);
  assert.deepEqual(body.installed, []);
  assert.equal(body.reboot_required, false);
  assert.equal(body.reboot_scheduled, false);
  const installed = await root.installed();
  assert.deepEqual(
    [installed.labsec, installed.labnewer, installed.labhold, installed.labreg, installed.labkernel],
    ["1.1-1", "1.1-1", "1.0-1", "1.0-1", "1.0-1"],
  );
  // Only an apply recorded `reboot_scheduled` starts the reboot's delay: this one ended without.
  const s = (await call({ method: "GET", url: `/v1/system/applies/${body.id}` })).json();
  assert.equal(s.state, "completed");
  assert.equal(s.reboot_at, null);
  assert.equal(s.reboot, null);
  assert.equal(reboot.ranAt(), undefined, "no reboot when none is required");
  const [rec] = (await call({ method: "GET", url: "/v1/system/apply-history" })).json().applies;
  assert.equal(rec.package_manager, "dnf");
  assert.equal(rec.outcome, "succeeded");
  assert.deepEqual(rec.upgraded, body.upgraded);
});

test("dnf: a full apply upgrades all but held packages; the reboot needs-restarting asks for runs after the response", async (t) => {
  const { call, root, reboot } = await setup(t);
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", auto_reboot: true },
  });
  // Checked at once: the reboot is due 300 ms after the answer, and the checks below may take longer.
  assert.equal(reboot.ranAt(), undefined, "not before the response");
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  assert.deepEqual(body.upgraded.map((p: { name: string; to: string }) => `${p.name} ${p.to}`).sort(), [
    "labkernel 1.1-1",
    "labnewer 1.2-1",
    "labreg 1.1-1",
    "labsec 1.1-1",
  ]);
  assert.deepEqual(body.installed, [{ name: "dbus", arch: "noarch", version: "1.0-1" }]);
  assert.deepEqual(
    body.held_back.map((p: { name: string }) => p.name),
    ["labhold"],
  );
  assert.equal((await root.installed()).labhold, "1.0-1");
  assert.equal(body.reboot_required, true);
  assert.equal(body.reboot_scheduled, true);
  const deadline = Date.now() + 5_000;
  while (reboot.ranAt() === undefined && Date.now() < deadline) await sleep(50);
  const ranAt = reboot.ranAt();
  assert.ok(ranAt !== undefined, "the reboot command ran");
  // Not before the time the answer announced (a timer may fire up to a millisecond early).
  assert.ok(ranAt >= Date.parse(body.reboot_at) - 1, `ran at ${ranAt}, announced ${body.reboot_at}`);
});

test("dnf: a lock held by another process makes check wait, then fail as busy naming it", async (t) => {
  const { call, root } = await setup(t, { HOSTKEEPER_PACKAGE_LOCK_TIMEOUT_MS: "1000" });
  const holder = await holdPidFiles(t, [
    join(root.root, "var/cache/dnf/metadata_lock.pid"),
    join(root.root, "var/cache/dnf/download_lock.pid"),
    join(root.root, "var/lib/dnf/rpmdb_lock.pid"),
  ]);
  const started = Date.now();
  const r = await call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(r.statusCode, 500, r.body);
  assert.ok(Date.now() - started >= 1000, "waited for the time-out first");
  const p = r.json();
  assert.equal(p.code, "package_manager_busy");
  assert.match(p.detail, new RegExp(`held by process ${holder.pid} \\(sleep\\)`));
});

test("dnf: a broken repository makes check a 500 problem carrying dnf's error", async (t) => {
  const broken = mkdtempSync(join(tmpdir(), "hk-rpmrepo-broken-"));
  t.after(() => rmSync(broken, { recursive: true, force: true }));
  cpSync(repo, broken, { recursive: true });
  rmSync(join(broken, "repodata/repomd.xml"));
  const { call } = await setup(t, {}, broken);
  const r = await call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(r.statusCode, 500, r.body);
  const p = r.json();
  assert.equal(p.code, "package_manager_failed");
  assert.match(
    p.detail,
    /^dnf makecache failed \(exit 1\): Error: Failed to download metadata for repo 'test'/,
  );
});

test("dnf: the host's own package state is untouched", () => {
  assert.deepEqual(hostPackageState(), hostBefore);
});
