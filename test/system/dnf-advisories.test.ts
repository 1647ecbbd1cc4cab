import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, type TestContext, test } from "node:test";
import { buildTestApp } from "../helpers/app.js";
import { buildRpmRepo, createDnfRoot, type RpmSpec } from "../helpers/dnf-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

/**
 * labcrit: a critical security advisory with two CVEs, then a bugfix advisory for a newer version.
 * labmod: a moderate security advisory. labbug: a bugfix advisory only. labnone: no advisory at all.
 * labpin: a security update, version-locked at 1.0 in the lock tests.
 */
const RPMS: RpmSpec[] = [
  { name: "hk-release", version: "9", provides: "system-release(releasever) = 9" },
  ...["labcrit", "labmod", "labbug", "labnone", "labpin"].map((name) => ({ name, version: "1.0" })),
  { name: "labcrit", version: "1.1" },
  { name: "labcrit", version: "1.2" },
  { name: "labmod", version: "1.1" },
  { name: "labbug", version: "1.1" },
  { name: "labnone", version: "1.1" },
  { name: "labpin", version: "1.1" },
];
const INITIAL = [
  "hk-release",
  ...["labcrit", "labmod", "labbug", "labnone", "labpin"].map((n) => `${n}-1.0`),
];

let repo: string;
before(async () => {
  repo = await buildRpmRepo({ after: () => {} }, RPMS, [
    {
      id: "HK-SA-2024:0101",
      type: "security",
      severity: "Critical",
      cves: ["CVE-2024-1001", "CVE-2024-1002"],
      issued: "2024-02-03 04:05:06",
      packages: [{ name: "labcrit", version: "1.1" }],
    },
    {
      id: "HK-BA-2024:0102",
      type: "bugfix",
      issued: "2024-03-01 00:00:00",
      packages: [{ name: "labcrit", version: "1.2" }],
    },
    {
      id: "HK-SA-2024:0103",
      type: "security",
      severity: "Moderate",
      cves: ["CVE-2024-1003"],
      packages: [
        { name: "labmod", version: "1.1" },
        { name: "labpin", version: "1.1" },
      ],
    },
    { id: "HK-BA-2024:0104", type: "bugfix", packages: [{ name: "labbug", version: "1.1" }] },
  ]);
});
test.after(() => rmSync(repo, { recursive: true, force: true }));

async function setup(t: TestContext, env: Record<string, string> = {}) {
  const root = await createDnfRoot(t, repo, INITIAL);
  const app = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
    HOSTKEEPER_PACKAGE_MANAGER: "dnf",
    HOSTKEEPER_DNF_INSTALLROOT: root.root,
    HOSTKEEPER_REBOOT_COMMAND: "true",
    HOSTKEEPER_SERVICES_RESTART_COMMAND: "none",
    ...env,
  });
  return { root, ...app };
}

type Update = { name: string; advisories: unknown[]; held: boolean; held_reason: string | null };

test("dnf: each update lists its updateinfo advisories, and the check counts packages by their highest severity", async (t) => {
  const { call } = await setup(t);
  const r = await call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  const u = Object.fromEntries((body.updates as Update[]).map((p) => [p.name, p]));
  assert.deepEqual(u.labcrit?.advisories, [
    {
      id: "HK-SA-2024:0101",
      type: "security",
      severity: "critical",
      cves: ["CVE-2024-1001", "CVE-2024-1002"],
      issued: "2024-02-03T04:05:06Z",
    },
    { id: "HK-BA-2024:0102", type: "bugfix", severity: "unknown", cves: [], issued: "2024-03-01T00:00:00Z" },
  ]);
  assert.deepEqual(u.labmod?.advisories, [
    {
      id: "HK-SA-2024:0103",
      type: "security",
      severity: "moderate",
      cves: ["CVE-2024-1003"],
      issued: "2024-01-01T00:00:00Z",
    },
  ]);
  assert.deepEqual(
    ((u.labbug?.advisories ?? []) as { id: string; type: string }[]).map((a) => [a.id, a.type]),
    [["HK-BA-2024:0104", "bugfix"]],
  );
  assert.deepEqual(u.labnone?.advisories, []);
  assert.deepEqual(body.severity_counts, { critical: 1, important: 0, moderate: 2, low: 0, unknown: 2 });
  assert.equal(body.security_updates, 3, "the security classification still comes from the advisories");
  assert.deepEqual(
    Object.values(u)
      .map((p) => [p.name, p.held, p.held_reason])
      .sort(),
    ["labbug", "labcrit", "labmod", "labnone", "labpin"].map((n) => [n, false, null]),
  );
});

test("dnf: a versionlocked package is reported held, and an apply holds it back with reason hold", async (t) => {
  const { call, root } = await setup(t);
  root.lock(["labpin-0:1.0-1.*"]);
  const check = (await call({ method: "POST", url: "/v1/system/check-updates" })).json();
  const pin = (check.updates as Update[]).find((p) => p.name === "labpin");
  assert.equal(pin?.held, true);
  assert.equal(pin?.held_reason, "hold");
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(r.statusCode, 200, r.body);
  assert.deepEqual(r.json().held_back, [
    { name: "labpin", arch: "noarch", current_version: "1.0-1", available_version: "1.1-1", reason: "hold" },
  ]);
  const installed = await root.installed();
  assert.deepEqual([installed.labpin, installed.labcrit, installed.labmod], ["1.0-1", "1.1-1", "1.1-1"]);
});

test("dnf: services_restart_required lists what the restart check prints after the apply; null when not asked", async (t) => {
  // `dnf needs-restarting -s` as the restart command would list the host's units: a stand-in that prints in
  // its format, and only once the apply has installed the new labmod in the root.
  const dir = mkdtempSync(join(tmpdir(), "hk-restart-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const script = join(dir, "needs-restarting");
  const { call, root } = await setup(t, { HOSTKEEPER_SERVICES_RESTART_COMMAND: `${script} -s` });
  writeFileSync(
    script,
    `#!/bin/sh\n[ "$1" = "-s" ] || exit 9\ngrep -qx 1.1 "${root.root}/usr/share/labmod/version" && printf 'labmod.service\\ncron.service\\nlabmod.service\\n'\nexit 0\n`,
  );
  chmodSync(script, 0o755);
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(r.statusCode, 200, r.body);
  const units = [
    { unit: "cron.service", pids: [], files: [] },
    { unit: "labmod.service", pids: [], files: [] },
  ];
  assert.deepEqual(r.json().services_restart_required, units);
  const [rec] = (await call({ method: "GET", url: "/v1/system/apply-history" })).json().applies;
  assert.deepEqual(rec.services_restart_required, units);

  const other = await setup(t);
  const n = await other.call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(n.json().services_restart_required, null);
});

test("dnf: the host's own package state is untouched", () => {
  assert.deepEqual(hostPackageState(), hostBefore);
});
