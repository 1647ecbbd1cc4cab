import assert from "node:assert/strict";
import { mkdtempSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, type TestContext, test } from "node:test";
import { metricSample } from "../../support/prometheus.js";
import { buildTestApp } from "../helpers/app.js";
import {
  type AptRepo,
  type AptSandbox,
  aptAgentEnv,
  buildAptRepo,
  changelogEntry,
  createAptSandbox,
  type DebSpec,
  debianArch,
  initialEntry,
} from "../helpers/apt-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";

// Taken first: the host's package state, compared at the end.
const hostBefore = hostPackageState();

const D2 = "Tue, 06 Feb 2024 12:30:00 +0100";

/** cmpsec: a security update naming two CVEs; cmpreg: a regular update naming one. */
const DEBS: DebSpec[] = [
  { name: "cmpsec", version: "1.0", suites: ["bookworm"], changelog: initialEntry("cmpsec") },
  { name: "cmpreg", version: "1.0", suites: ["bookworm"], changelog: initialEntry("cmpreg") },
  {
    name: "cmpsec",
    version: "1.1",
    suites: ["bookworm-security"],
    changelog:
      changelogEntry(
        "cmpsec",
        "1.1",
        "bookworm-security",
        "high",
        ["Fix CVE-2024-3001 and CVE-2024-3002."],
        D2,
      ) + initialEntry("cmpsec"),
  },
  {
    name: "cmpreg",
    version: "1.1",
    suites: ["bookworm-updates"],
    changelog:
      changelogEntry("cmpreg", "1.1", "bookworm", "low", ["Fix CVE-2024-3003."], D2) + initialEntry("cmpreg"),
  },
];

let repo: AptRepo;
before(async () => {
  repo = await buildAptRepo({ after: () => {} }, DEBS, debianArch());
});
test.after(() => rmSync(repo.dir, { recursive: true, force: true }));

async function agent(t: TestContext, sandbox: AptSandbox, dataDir: string) {
  const app = await buildTestApp(
    t,
    { ...aptAgentEnv(sandbox), HOSTKEEPER_REBOOT_COMMAND: "true" },
    { dataDir },
  );
  const compliance = async () => (await app.call({ method: "GET", url: "/v1/system/compliance" })).json();
  const metric = async (name: string) =>
    metricSample((await app.call({ method: "GET", url: "/metrics" })).body, `hostkeeper_${name}`, {});
  const check = async () => {
    const r = await app.call({ method: "POST", url: "/v1/system/check-updates" });
    assert.equal(r.statusCode, 200, r.body);
    return r.json() as { checked_at: string; updates: { name: string; first_seen_at: string }[] };
  };
  return { ...app, compliance, metric, check };
}

test("compliance: pending security updates and CVEs with their age, first sightings kept across a restart, moving as an apply installs; the reboot since its first check", async (t) => {
  const sandbox = await createAptSandbox(t, repo, { install: ["cmpsec=1.0", "cmpreg=1.0"] });
  const dataDir = mkdtempSync(join(tmpdir(), "hk-compliance-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const a = await agent(t, sandbox, dataDir);
  assert.deepEqual(await a.compliance(), {
    checked_at: null,
    security_updates_pending: 0,
    oldest_security_update_age_seconds: null,
    cves_pending: 0,
    oldest_cve_age_seconds: null,
    last_successful_apply_at: null,
    reboot_required: null,
    reboot_required_since: null,
  });
  assert.ok(Number.isNaN(await a.metric("oldest_pending_security_update_age_seconds")), "absent, not 0");

  const one = await a.check();
  const seen = Object.fromEntries(one.updates.map((u) => [u.name, u.first_seen_at]));
  assert.deepEqual(seen, { cmpreg: one.checked_at, cmpsec: one.checked_at });
  const c1 = await a.compliance();
  assert.equal(c1.checked_at, one.checked_at);
  assert.equal(c1.security_updates_pending, 1);
  assert.equal(c1.cves_pending, 3, "the regular update's CVE counts too");
  assert.ok(c1.oldest_security_update_age_seconds >= 0 && c1.oldest_security_update_age_seconds < 60);
  assert.equal(await a.metric("security_updates_pending"), 1);
  assert.ok(!Number.isNaN(await a.metric("oldest_pending_security_update_age_seconds")));
  await a.app.close();

  // Another agent on the same data: a later check keeps the first sightings.
  await new Promise((r) => setTimeout(r, 1100));
  const b = await agent(t, sandbox, dataDir);
  const two = await b.check();
  assert.notEqual(two.checked_at, one.checked_at);
  assert.deepEqual(Object.fromEntries(two.updates.map((u) => [u.name, u.first_seen_at])), seen);
  assert.ok((await b.compliance()).oldest_security_update_age_seconds >= 1);

  // The security apply installs cmpsec: its update and CVEs are no longer pending; cmpreg's are.
  const applied = await b.call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(applied.statusCode, 200, applied.body);
  assert.equal((await sandbox.installed()).cmpsec, "1.1");
  const c2 = await b.compliance();
  assert.equal(c2.security_updates_pending, 0);
  assert.equal(c2.oldest_security_update_age_seconds, null);
  assert.equal(c2.cves_pending, 1);
  assert.ok(c2.last_successful_apply_at !== null);
  assert.equal(await b.metric("security_updates_pending"), 0);
  assert.equal(
    await b.metric("last_successful_apply_timestamp_seconds"),
    Date.parse(c2.last_successful_apply_at) / 1000,
  );

  // A reboot required: since the first check that found it, while it still is.
  writeFileSync(sandbox.rebootRequiredFile, "");
  const three = await b.check();
  await new Promise((r) => setTimeout(r, 1100));
  await b.check();
  const c3 = await b.compliance();
  assert.deepEqual([c3.reboot_required, c3.reboot_required_since], [true, three.checked_at]);
  assert.equal(
    await b.metric("reboot_required_since_timestamp_seconds"),
    Date.parse(three.checked_at) / 1000,
  );
  unlinkSync(sandbox.rebootRequiredFile);
  await b.check();
  assert.deepEqual([(await b.compliance()).reboot_required_since], [null]);
  assert.deepEqual(hostPackageState(), hostBefore, "the host's own packages are untouched");
});
