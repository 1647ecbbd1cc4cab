import assert from "node:assert/strict";
import { readdirSync, statfsSync } from "node:fs";
import { join } from "node:path";
import { type TestContext, test } from "node:test";
import { parseAptSpace } from "../../src/system/packages/apt-output.js";
import { DnfPackageManager } from "../../src/system/packages/dnf.js";
import { parseDnfTransaction } from "../../src/system/packages/dnf-output.js";
import { buildTestApp } from "../helpers/app.js";
import {
  aptAgentEnv,
  buildAptRepo,
  createAptSandbox,
  type DebSpec,
  debianArch,
} from "../helpers/apt-sandbox.js";
import { buildRpmRepo, createDnfRoot, type RpmSpec } from "../helpers/dnf-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

/** More free space than any test machine has, in MB. */
const HUGE_MB = "1000000000";
const MIB = 1024 * 1024;

test("apt's and dnf's words for what an upgrade downloads and adds", () => {
  assert.deepEqual(
    parseAptSpace(
      "2 upgraded, 1 newly installed, 0 to remove and 0 not upgraded.\nNeed to get 12.3 MB/40.1 MB of archives.\nAfter this operation, 1,024 kB of additional disk space will be used.\n",
    ),
    { downloadBytes: 12_300_000, installBytes: 1_024_000 },
  );
  assert.deepEqual(
    parseAptSpace(
      "Need to get 0 B/5038 B of archives.\nAfter this operation, 51.2 kB disk space will be freed.\n",
    ),
    { downloadBytes: 0, installBytes: 0 },
  );
  assert.deepEqual(parseAptSpace("0 upgraded, 0 newly installed, 0 to remove and 0 not upgraded.\n"), {
    downloadBytes: 0,
    installBytes: 0,
  });
  const dnf = [
    "Dependencies resolved.",
    "================================================================================",
    " Package                 Arch        Version                 Repository    Size",
    "================================================================================",
    "Upgrading:",
    " bash                    x86_64      5.2.15-3.fc38           updates      1.8 M",
    " libreoffice-langpack-en-gb-extra-data",
    "                         noarch      1:7.5.6.2-1.fc38        updates      156 k",
    "     replacing  libreoffice-old.noarch 1:7.5.5.1-1.fc38",
    "Installing dependencies:",
    " libfoo                  x86_64      1.0-1                   updates      999  ",
    "Removing:",
    " oldthing                x86_64      0.9-1                   @System       12 k",
    "",
    "Transaction Summary",
    "================================================================================",
    "Install  1 Package",
    "Upgrade  2 Packages",
    "",
    "Total download size: 2.5 M",
  ].join("\n");
  assert.deepEqual(parseDnfTransaction(dnf), {
    downloadBytes: Math.round(2.5 * MIB),
    packages: [
      "bash-5.2.15-3.fc38.x86_64",
      "libreoffice-langpack-en-gb-extra-data-1:7.5.6.2-1.fc38.noarch",
      "libfoo-1.0-1.x86_64",
    ],
  });
});

/** guardsec: a security update that says it adds 2 GB once installed (its control file says so). */
const DEBS: DebSpec[] = [
  { name: "guardsec", version: "1.0", suites: ["bookworm"] },
  {
    name: "guardsec",
    version: "1.1",
    suites: ["bookworm-security"],
    control: { "Installed-Size": "2048000" },
  },
];

async function aptSetup(t: TestContext, minFreeMb: string) {
  const repo = await buildAptRepo(t, DEBS, debianArch());
  const sandbox = await createAptSandbox(t, repo, { install: ["guardsec=1.0"] });
  const app = await buildTestApp(t, {
    ...aptAgentEnv(sandbox),
    HOSTKEEPER_SERVICES_RESTART_COMMAND: "none",
    HOSTKEEPER_REBOOT_COMMAND: "true",
    HOSTKEEPER_MIN_FREE_MB: minFreeMb,
  });
  return { sandbox, ...app };
}

type Call = Awaited<ReturnType<typeof buildTestApp>>["call"];
const applies = async (call: Call) =>
  (await call({ method: "GET", url: "/v1/system/apply-history" })).json().applies as unknown[];

test("apt: a threshold the sandbox cannot meet refuses apply (sync and async) and download with 507, recording and changing nothing", async (t) => {
  const { call, sandbox } = await aptSetup(t, HUGE_MB);
  const apply = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(apply.statusCode, 507, apply.body);
  const p = apply.json();
  assert.equal(p.code, "insufficient_storage");
  // Everything in the sandbox is on one filesystem: named once, by the sandbox's root.
  assert.equal(p.filesystems.length, 1, apply.body);
  const [root] = p.filesystems;
  assert.equal(root.path, sandbox.root);
  assert.ok(root.free_mb < Number(HUGE_MB) && root.needed_mb >= Number(HUGE_MB), apply.body);
  assert.match(
    p.detail,
    new RegExp(`^not enough free space to apply the updates: ${sandbox.root} has \\d+ MB free`),
  );

  const async = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", callback_url: "http://127.0.0.1:9/never" },
    headers: { prefer: "respond-async" },
  });
  assert.equal(async.statusCode, 507, async.body);
  assert.equal(async.headers.location, undefined);

  const download = await call({
    method: "POST",
    url: "/v1/system/download-updates",
    payload: { update_type: "full" },
  });
  assert.equal(download.statusCode, 507, download.body);
  // A download writes the package cache only.
  assert.deepEqual(
    download.json().filesystems.map((f: { path: string }) => f.path),
    [join(sandbox.root, "var/cache/apt/archives")],
  );
  assert.deepEqual(await applies(call), [], "no apply recorded");
  assert.equal((await sandbox.installed()).guardsec, "1.0");
  assert.deepEqual(
    readdirSync(join(sandbox.root, "var/cache/apt/archives")).filter((f) => f.endsWith(".deb")),
    [],
  );
});

test("apt: the space apt says the upgrade adds counts on top of the minimum", async (t) => {
  const probe = await aptSetup(t, "0");
  const s = statfsSync(probe.sandbox.root);
  const freeMb = Math.floor((s.bavail * s.bsize) / MIB);
  // 1,000 MB short of the free space: enough for the minimum, not for the 2 GB guardsec 1.1 says it adds.
  const minFree = Math.max(0, freeMb - 1000);
  const { call, sandbox } = await aptSetup(t, String(minFree));
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(r.statusCode, 507, r.body);
  const [fsys] = r.json().filesystems;
  // apt says 2097 MB (SI) of additional disk space: 2,000 MiB.
  assert.equal(fsys.needed_mb, minFree + 2000, r.body);
  assert.deepEqual(await applies(call), []);
  assert.equal((await sandbox.installed()).guardsec, "1.0");

  // The same sandbox with room for it applies.
  const ok = await probe.call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(ok.statusCode, 200, ok.body);
  assert.equal((await probe.sandbox.installed()).guardsec, "1.1");
});

/** A name longer than dnf's column: its table row wraps. */
const LONG = "guard-a-package-whose-name-is-longer-than-the-column";
const RPMS: RpmSpec[] = [
  { name: "hk-release", version: "9", provides: "system-release(releasever) = 9" },
  ...["guarda", LONG].flatMap((name) => [
    { name, version: "1.0" },
    { name, version: "1.1" },
  ]),
];

test("dnf: the transaction's sizes, and a threshold the sandbox cannot meet refuses apply and download", async (t) => {
  const repo = await buildRpmRepo(t, RPMS, []);
  const root = await createDnfRoot(t, repo, ["hk-release", "guarda-1.0", `${LONG}-1.0`]);
  const dnf = new DnfPackageManager({
    env: process.env,
    installroot: root.root,
    hold: [],
    lockTimeoutMs: 10_000,
    commandTimeoutMs: 60_000,
  });
  // Each package installs /usr/share/<name>/version, `1.1\n`: 4 bytes; both in the local cache already.
  assert.deepEqual(await dnf.spaceNeeded("full"), { downloadBytes: 0, installBytes: 8 });
  assert.deepEqual(await dnf.spaceNeeded("security"), { downloadBytes: 0, installBytes: 0 });

  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
    HOSTKEEPER_PACKAGE_MANAGER: "dnf",
    HOSTKEEPER_DNF_INSTALLROOT: root.root,
    HOSTKEEPER_REBOOT_COMMAND: "true",
    HOSTKEEPER_SERVICES_RESTART_COMMAND: "none",
    HOSTKEEPER_MIN_FREE_MB: HUGE_MB,
  });
  for (const [url, headers] of [
    ["/v1/system/apply-updates", {}],
    ["/v1/system/apply-updates", { prefer: "respond-async" }],
    ["/v1/system/download-updates", {}],
  ] as const) {
    const r = await call({ method: "POST", url, payload: { update_type: "full" }, headers });
    assert.equal(r.statusCode, 507, r.body);
    const [fsys] = r.json().filesystems;
    assert.equal(fsys.path, url.includes("download") ? join(root.root, "var/cache/dnf") : root.root);
  }
  assert.deepEqual(await applies(call), []);
  assert.equal((await root.installed()).guarda, "1.0-1");
});

test("disk guard: the host's own package state is untouched", () => {
  assert.deepEqual(hostPackageState(), hostBefore);
});
