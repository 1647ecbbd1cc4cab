import assert from "node:assert/strict";
import { chmodSync, cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, type TestContext, test } from "node:test";
import { gzipSync } from "node:zlib";
import {
  changelogAdvisories,
  compareDebianVersions,
  parseChangelog,
  readDebChangelog,
} from "../../src/system/packages/apt-changelog.js";
import { CHILD_ENV, childEnv } from "../../src/util/child-env.js";
import { buildTestApp } from "../helpers/app.js";
import {
  type AptRepo,
  aptAgentEnv,
  buildAptRepo,
  changelogEntry,
  createAptSandbox,
  type DebSpec,
  debianArch,
  initialEntry,
} from "../helpers/apt-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";
import { exec } from "../helpers/processes.js";

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

const D1 = "Mon, 01 Jan 2024 00:00:00 +0000";
const D2 = "Tue, 06 Feb 2024 12:30:00 +0100";
const D3 = "Fri, 01 Mar 2024 08:00:00 +0000";

/**
 * labsec: a security update whose changelog names a DSA and two CVEs. labreg: a regular update two entries
 * ahead, one naming a CVE. labnolog: no changelog. labconf: a security update whose new dependency conflicts
 * with the installed labold (a security apply never removes, so apt keeps it back). labph: an Ubuntu phased
 * update at 0%. labmark: held with apt-mark.
 */
const DEBS: DebSpec[] = [
  ...["labsec", "labreg"].map(
    (name): DebSpec => ({ name, version: "1.0", suites: ["bookworm"], changelog: initialEntry(name) }),
  ),
  ...["labnolog", "labconf", "labold", "labph", "labmark"].map(
    (name): DebSpec => ({ name, version: "1.0", suites: ["bookworm"] }),
  ),
  {
    name: "labsec",
    version: "1.1",
    suites: ["bookworm-security"],
    changelog:
      changelogEntry(
        "labsec",
        "1.1",
        "bookworm-security",
        "high",
        ["Non-maintainer upload by the Security Team.", "Fix CVE-2024-2001 and CVE-2024-2002 (DSA-5601-1)."],
        D2,
      ) + initialEntry("labsec"),
  },
  {
    name: "labreg",
    version: "1.2",
    suites: ["bookworm-updates"],
    changelog:
      changelogEntry("labreg", "1.2", "bookworm", "low", ["Fix a crash at start."], D3) +
      changelogEntry("labreg", "1.1", "bookworm", "medium", ["Fix CVE-2024-2003."], D2) +
      initialEntry("labreg"),
  },
  { name: "labnolog", version: "1.1", suites: ["bookworm-updates"] },
  { name: "labconf", version: "1.1", suites: ["bookworm-security"], depends: "labnewdep" },
  { name: "labnewdep", version: "1.0", suites: ["bookworm-security"], control: { Conflicts: "labold" } },
  { name: "labph", version: "1.1", suites: ["jammy-updates"], phased: 0 },
  { name: "labmark", version: "1.1", suites: ["bookworm-updates"] },
];
const INITIAL = ["labsec", "labreg", "labnolog", "labconf", "labold", "labph", "labmark"].map(
  (n) => `${n}=1.0`,
);

let repo: AptRepo;
before(async () => {
  repo = await buildAptRepo({ after: () => {} }, DEBS, debianArch());
});
test.after(() => rmSync(repo.dir, { recursive: true, force: true }));

async function setup(
  t: TestContext,
  env: Record<string, string> = {},
  machineId = "0123456789abcdef0123456789abcdef",
  sourcesList?: string,
) {
  const sandbox = await createAptSandbox(t, repo, { install: INITIAL, machineId, sourcesList });
  await sandbox.aptMark(["hold", "labmark"]);
  const app = await buildTestApp(t, {
    ...aptAgentEnv(sandbox),
    HOSTKEEPER_REBOOT_COMMAND: "true",
    ...env,
  });
  return { sandbox, ...app };
}

type Update = {
  name: string;
  advisories: unknown[];
  held: boolean;
  held_reason: string | null;
  security: boolean;
};
const byName = (list: Update[]) => Object.fromEntries(list.map((p) => [p.name, p]));

test("apt: advisories come from the changelog entries between the installed and the new version", async (t) => {
  const { call } = await setup(t);
  const r = await call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  const u = byName(body.updates);
  assert.deepEqual(u.labsec?.advisories, [
    {
      id: "DSA-5601-1",
      type: "security",
      severity: "important",
      cves: ["CVE-2024-2001", "CVE-2024-2002"],
      issued: "2024-02-06T11:30:00.000Z",
    },
  ]);
  assert.deepEqual(u.labreg?.advisories, [
    { id: "labreg/1.2", type: "bugfix", severity: "unknown", cves: [], issued: "2024-03-01T08:00:00.000Z" },
    {
      id: "labreg/1.1",
      type: "security",
      severity: "moderate",
      cves: ["CVE-2024-2003"],
      issued: "2024-02-06T11:30:00.000Z",
    },
  ]);
  assert.equal(u.labreg?.security, false, "security still means a security origin");
  assert.deepEqual(u.labnolog?.advisories, [], "no changelog in the package: nothing to report");
  assert.deepEqual(body.severity_counts, { critical: 0, important: 1, moderate: 1, low: 0, unknown: 4 });

  // Changelogs are read once per package version; the second check gives the same.
  const again = (await call({ method: "POST", url: "/v1/system/check-updates" })).json();
  assert.deepEqual(byName(again.updates).labsec?.advisories, u.labsec?.advisories);
});

test("apt: a .deb apt already downloaded is read from its cache; one that cannot be downloaded leaves the others' advisories", async (t) => {
  const copy = mkdtempSync(join(tmpdir(), "hk-aptrepo-copy-"));
  t.after(() => rmSync(copy, { recursive: true, force: true }));
  cpSync(repo.dir, copy, { recursive: true });
  // copy: (not file:) so apt keeps what it downloads in its archives cache, as from a remote mirror.
  const sources = repo.sourcesList.replaceAll(`file:${repo.dir}`, `copy:${copy}`);
  const { call, sandbox } = await setup(t, {}, undefined, sources);
  // labsec 1.1 goes into apt's archives cache (as a download-only run leaves it), then out of the repository.
  await sandbox.aptGet(["-y", "-q", "--download-only", "install", "labsec"]);
  rmSync(join(copy, "debian-security/pool/bookworm-security/labsec_1.1_all.deb"));
  // labnolog 1.1 cannot be downloaded any more: its download fails, the others are still read.
  rmSync(join(copy, "debian/pool/bookworm-updates/labnolog_1.1_all.deb"));
  const r = await call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(r.statusCode, 200, r.body);
  const u = byName(r.json().updates);
  assert.deepEqual(
    ((u.labsec?.advisories ?? []) as { id: string }[]).map((a) => a.id),
    ["DSA-5601-1"],
    "read from apt's cache",
  );
  assert.deepEqual(
    ((u.labreg?.advisories ?? []) as { id: string }[]).map((a) => a.id),
    ["labreg/1.2", "labreg/1.1"],
    "downloaded although another download failed",
  );
  assert.deepEqual(u.labnolog?.advisories, []);
});

test("apt: changelogs not read within their time-out leave advisories empty, and the check still answers", async (t) => {
  const { call } = await setup(t, { HOSTKEEPER_APT_CHANGELOG_TIMEOUT_MS: "1" });
  const r = await call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  assert.deepEqual(
    (body.updates as Update[]).filter((u) => u.advisories.length > 0).map((u) => u.name),
    [],
  );
  assert.deepEqual(body.severity_counts, { critical: 0, important: 0, moderate: 0, low: 0, unknown: 6 });
});

test("apt: held (apt-mark), phased and kept-back updates are reported with their reason", async (t) => {
  const { call } = await setup(t);
  const body = (await call({ method: "POST", url: "/v1/system/check-updates" })).json();
  const u = byName(body.updates);
  assert.deepEqual(Object.fromEntries(Object.values(u).map((p) => [p.name, [p.held, p.held_reason]])), {
    labsec: [false, null],
    labreg: [false, null],
    labnolog: [false, null],
    labconf: [false, "kept_back"],
    labph: [false, "phased"],
    labmark: [true, "hold"],
  });
});

test("apt: without a machine id apt does not phase, and the update is not reported phased", async (t) => {
  const { call } = await setup(t, {}, "");
  const body = (await call({ method: "POST", url: "/v1/system/check-updates" })).json();
  assert.equal(byName(body.updates).labph?.held_reason, null);
});

test("apt: a security apply keeps back the update that needs a removal; a full apply holds back the phased and the held", async (t) => {
  const { call, sandbox } = await setup(t);
  const s = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(s.statusCode, 200, s.body);
  assert.deepEqual(s.json().held_back, [
    { name: "labconf", arch: "all", current_version: "1.0", available_version: "1.1", reason: "kept_back" },
  ]);
  assert.equal((await sandbox.installed()).labsec, "1.1");

  const f = await call({ method: "POST", url: "/v1/system/apply-updates", payload: { update_type: "full" } });
  assert.equal(f.statusCode, 200, f.body);
  const body = f.json();
  assert.deepEqual(
    [...body.held_back].sort((a, b) => a.name.localeCompare(b.name)),
    [
      { name: "labmark", arch: "all", current_version: "1.0", available_version: "1.1", reason: "hold" },
      { name: "labph", arch: "all", current_version: "1.0", available_version: "1.1", reason: "phased" },
    ],
  );
  assert.deepEqual(body.removed, [{ name: "labold", arch: "all", version: "1.0" }]);
  const installed = await sandbox.installed();
  assert.deepEqual(
    [installed.labconf, installed.labph, installed.labmark, installed.labnewdep],
    ["1.1", "1.0", "1.0", "1.0"],
  );
});

test("apt: with needrestart as the restart command, services_restart_required holds its units after the apply", async (t) => {
  // Installing needrestart adds an apt hook to the host: a stand-in that prints its batch format, and only
  // once labsec 1.1 is installed.
  const dir = mkdtempSync(join(tmpdir(), "hk-needrestart-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const fake = join(dir, "needrestart");
  const { call, sandbox } = await setup(t, {
    HOSTKEEPER_NEEDRESTART: fake,
    HOSTKEEPER_SERVICES_RESTART_COMMAND: `${fake} -b -r l`,
  });
  writeFileSync(
    fake,
    [
      "#!/bin/sh",
      "echo NEEDRESTART-VER: 3.6",
      'if [ "$*" = "-b -k" ]; then echo NEEDRESTART-KSTA: 1; exit 0; fi',
      '[ "$*" = "-b -r l" ] || exit 9',
      `grep -q "^Version: 1.1" "${sandbox.root}/var/lib/dpkg/status" || exit 0`,
      "echo NEEDRESTART-SVC: labsec.service",
      "echo NEEDRESTART-SVC: cron.service",
      "",
    ].join("\n"),
  );
  chmodSync(fake, 0o755);
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  // needrestart names units, not their processes or files.
  const units = [
    { unit: "cron.service", pids: [], files: [] },
    { unit: "labsec.service", pids: [], files: [] },
  ];
  assert.equal(r.statusCode, 200, r.body);
  assert.deepEqual(r.json().services_restart_required, units);
  assert.equal(r.json().reboot_required, false);
  const status = await call({ method: "GET", url: `/v1/system/applies/${r.json().id}` });
  assert.deepEqual(status.json().services_restart_required, units);
});

test("apt: services_restart_required is null when the restart command is none", async (t) => {
  const { call } = await setup(t, { HOSTKEEPER_SERVICES_RESTART_COMMAND: "none" });
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(r.statusCode, 200, r.body);
  assert.equal(r.json().services_restart_required, null);
});

test("Debian versions compare as dpkg compares them", async () => {
  const pairs = [
    ["1.0", "1.0"],
    ["1.0", "1.1"],
    ["1.0-1", "1.0-1+deb12u1"],
    ["1.0~rc1", "1.0"],
    ["1:0.9", "2.0"],
    ["2.30-1ubuntu1", "2.30-1ubuntu1.1"],
    ["1.0a", "1.0+"],
    ["1.10", "1.9"],
    ["3.0.11-1~deb12u2", "3.0.11-1~deb12u1"],
    ["0.0010", "0.01"],
  ];
  for (const [a = "", b = ""] of pairs) {
    const ours = Math.sign(compareDebianVersions(a, b));
    const lt = await exec("dpkg", ["--compare-versions", a, "lt", b]).then(
      () => -1,
      async () =>
        (await exec("dpkg", ["--compare-versions", a, "eq", b]).then(
          () => true,
          () => false,
        ))
          ? 0
          : 1,
    );
    assert.equal(ours, lt, `${a} vs ${b}`);
  }
});

test("changelog entries: USN ids, security suites, urgency with comments, epochs, and only the entries in range", () => {
  const text =
    changelogEntry(
      "openssl",
      "1:3.0.13-0ubuntu3.2",
      "noble-security",
      "medium",
      ["SECURITY UPDATE: fix (USN-6937-1)", "debian/patches/CVE-2024-5535.patch: fix."],
      D3,
    ) +
    changelogEntry(
      "openssl",
      "1:3.0.13-0ubuntu3.1",
      "noble-security",
      "medium (high for CVE-2024-4741)",
      ["No CVE here."],
      D2,
    ) +
    changelogEntry("openssl", "1:3.0.13-0ubuntu3", "noble", "emergency", ["Rebuild."], D1) +
    "Old-style entries after a blank line are skipped\n";
  const entries = parseChangelog(text);
  assert.deepEqual(
    entries.map((e) => [e.version, e.distribution, e.urgency]),
    [
      ["1:3.0.13-0ubuntu3.2", "noble-security", "medium"],
      ["1:3.0.13-0ubuntu3.1", "noble-security", "medium"],
      ["1:3.0.13-0ubuntu3", "noble", "emergency"],
    ],
  );
  assert.deepEqual(changelogAdvisories("openssl", entries, "1:3.0.13-0ubuntu3", "1:3.0.13-0ubuntu3.2"), [
    {
      id: "USN-6937-1",
      type: "security",
      severity: "moderate",
      cves: ["CVE-2024-5535"],
      issued: "2024-03-01T08:00:00.000Z",
    },
    {
      id: "openssl/1:3.0.13-0ubuntu3.1",
      type: "security",
      severity: "moderate",
      cves: [],
      issued: "2024-02-06T11:30:00.000Z",
    },
  ]);
  assert.deepEqual(changelogAdvisories("openssl", entries, "1:3.0.13-0ubuntu3.2", "1:3.0.13-0ubuntu3.2"), []);
});

test("a changelog is found in a package's data archive behind a GNU long name and behind a pax header", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-deb-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // A name long enough that the changelog's path passes tar's 100 characters.
  const name = `lablong${"x".repeat(90)}`;
  const entry = changelogEntry(name, "2.0", "bookworm-security", "critical", ["Fix CVE-2024-3001."], D1);
  const root = join(dir, "pkg");
  const doc = join(root, "usr/share/doc", name);
  await exec("mkdir", ["-p", join(root, "DEBIAN"), doc, join(root, "usr/lib", name)]);
  writeFileSync(join(root, "usr/lib", name, "data"), "x".repeat(100_000));
  writeFileSync(join(doc, "changelog.Debian.gz"), gzipSync(entry));
  writeFileSync(
    join(root, "DEBIAN/control"),
    `Package: ${name}\nVersion: 2.0\nArchitecture: all\nMaintainer: t <t@example.invalid>\nDescription: t\n`,
  );
  const deb = join(dir, "long.deb");
  await exec("dpkg-deb", ["--root-owner-group", "-Zgzip", "--build", root, deb]);
  const env = childEnv(process.env, CHILD_ENV.packages, { LC_ALL: "C" });
  const read = await readDebChangelog(deb, name, 10_000, env);
  assert.deepEqual(
    read?.entries.map((e) => [e.version, e.urgency]),
    [["2.0", "critical"]],
  );

  // The same files in a pax-format data.tar, as .deb builders other than dpkg-deb write them.
  const pax = join(dir, "pax");
  await exec("mkdir", ["-p", pax]);
  await exec("tar", ["--format=pax", "-czf", join(pax, "data.tar.gz"), "-C", root, "./usr"]);
  await exec("tar", ["-czf", join(pax, "control.tar.gz"), "-C", join(root, "DEBIAN"), "./control"]);
  writeFileSync(join(pax, "debian-binary"), "2.0\n");
  const paxDeb = join(dir, "pax.deb");
  await exec("ar", [
    "rc",
    paxDeb,
    join(pax, "debian-binary"),
    join(pax, "control.tar.gz"),
    join(pax, "data.tar.gz"),
  ]);
  const fromPax = await readDebChangelog(paxDeb, name, 10_000, env);
  assert.equal(fromPax?.source, name);
  assert.deepEqual(
    fromPax?.entries.map((e) => e.version),
    ["2.0"],
  );

  assert.equal(
    await readDebChangelog(deb, "another-package", 10_000, env),
    undefined,
    "no changelog of its own",
  );
});

test("apt: the host's own package state is untouched", () => {
  assert.deepEqual(hostPackageState(), hostBefore);
});
