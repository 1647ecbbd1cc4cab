import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { Mutex } from "../../src/system/mutex.js";
import { AptPackageManager } from "../../src/system/packages/apt.js";
import {
  aptLockHolder,
  aptProgress,
  isSecurityOrigin,
  parseSimulation,
} from "../../src/system/packages/apt-output.js";
import {
  advisoryPackages,
  dnfCacheDir,
  dnfLockHolder,
  dnfProgress,
  nevraKey,
  parseUpdateInfo,
  parseVersionLocks,
} from "../../src/system/packages/dnf-output.js";
import { detectPackageManager } from "../../src/system/packages/select.js";
import { buildTestApp } from "../helpers/app.js";

const ENV = {
  HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
  // No package manager runs in this file; if one did, buildTestApp's apt configuration has an empty root.
  HOSTKEEPER_PACKAGE_MANAGER: "apt",
};

test("apply-updates answers 400 for a missing or unknown update_type, a non-boolean auto_reboot, unknown fields", async (t) => {
  const { call } = await buildTestApp(t, ENV);
  for (const [payload, field] of [
    [{}, "body.update_type"],
    [{ update_type: "everything" }, "body.update_type"],
    [{ update_type: 1 }, "body.update_type"],
    [{ update_type: "security", auto_reboot: "true" }, "body.auto_reboot"],
    [{ update_type: "security", auto_reboot: 1 }, "body.auto_reboot"],
    [{ update_type: "full", reboot: true }, "body.reboot"],
  ] as const) {
    const r = await call({ method: "POST", url: "/v1/system/apply-updates", payload });
    assert.equal(r.statusCode, 400, `${JSON.stringify(payload)}: ${r.body}`);
    const p = r.json();
    assert.equal(p.code, "validation_failed");
    assert.ok(
      p.errors.some((e: { field: string }) => e.field === field),
      `${JSON.stringify(payload)}: ${r.body}`,
    );
  }
  const none = await call({ method: "POST", url: "/v1/system/apply-updates" });
  assert.equal(none.statusCode, 400, none.body);
  assert.equal((await call({ method: "GET", url: "/v1/system/apply-history" })).json().applies.length, 0);
  const bad = await call({ method: "GET", url: "/v1/system/apply-history?limit=0" });
  assert.equal(bad.statusCode, 400, bad.body);
});

test("the system endpoints need the bearer token", async (t) => {
  const { app } = await buildTestApp(t, ENV);
  for (const [method, url] of [
    ["POST", "/v1/system/check-updates"],
    ["POST", "/v1/system/apply-updates"],
    ["GET", "/v1/system/apply-history"],
    ["GET", "/v1/system/applies/1"],
    ["POST", "/v1/system/download-updates"],
  ] as const)
    assert.equal((await app.inject({ method, url })).statusCode, 401, url);
});

test("the OpenAPI document describes the system endpoints and their bodies", async (t) => {
  const { call } = await buildTestApp(t, ENV);
  const doc = (await call({ method: "GET", url: "/v1/openapi.json" })).json();
  const check = doc.paths["/v1/system/check-updates"].post;
  const apply = doc.paths["/v1/system/apply-updates"].post;
  const history = doc.paths["/v1/system/apply-history"].get;
  const status = doc.paths["/v1/system/applies/{apply_id}"].get;
  const download = doc.paths["/v1/system/download-updates"].post;
  for (const op of [check, apply, history, status, download]) {
    assert.deepEqual(op.tags, ["system"]);
    assert.ok(op.summary && op.description);
    assert.ok(op.responses["200"] && op.responses["401"]);
  }
  assert.ok(check.responses["500"].description.includes("package_manager_busy"));
  assert.ok(apply.responses["400"] && apply.responses["500"]);
  assert.ok(apply.responses["202"].headers.location && apply.responses["202"].headers["preference-applied"]);
  assert.match(apply.description, /Prefer: respond-async/);
  assert.ok(status.responses["404"].description.includes("apply_not_found"));
  for (const name of [
    "System",
    "PackageUpdate",
    "ApplyUpdatesRequest",
    "ApplyResult",
    "ApplyRecord",
    "ApplyHistory",
    "ApplyStatus",
    "DownloadUpdatesRequest",
    "DownloadResult",
  ])
    assert.ok(doc.components.schemas[name], name);
  assert.match(
    doc.components.schemas.ApplyUpdatesRequest.properties.auto_reboot.description,
    /Default `false`/,
  );
});

test("apt's simulation output: upgrades, their origins and architecture", () => {
  const out = [
    "Inst labboth [1.0] (1.1 Debian:12/bookworm-updates, Debian-Security:12/bookworm-security [all])",
    "Inst libssl3 [3.0.11-1~deb12u1] (3.0.11-1~deb12u2 Debian-Security:12/stable-security [amd64]) []",
    "Inst libc6:i386 [2.36-9] (2.36-9+deb12u4 Debian:12.5/stable [i386])",
    "Inst openssl [3.0.2-0ubuntu1.10] (3.0.2-0ubuntu1.12 Ubuntu:22.04/jammy-security [amd64])",
    "Inst newdep (1.0 Debian:12/bookworm [all])",
    "Remv oldpkg [1.0]",
    "Conf labboth (1.1 Debian:12/bookworm-updates, Debian-Security:12/bookworm-security [all])",
  ].join("\n");
  const plan = [...parseSimulation(out).values()];
  assert.deepEqual(
    plan.map((p) => [p.name, p.arch, p.from, p.to, p.security]),
    [
      ["labboth", "all", "1.0", "1.1", true],
      ["libssl3", "amd64", "3.0.11-1~deb12u1", "3.0.11-1~deb12u2", true],
      ["libc6", "i386", "2.36-9", "2.36-9+deb12u4", false],
      ["openssl", "amd64", "3.0.2-0ubuntu1.10", "3.0.2-0ubuntu1.12", true],
    ],
  );
  assert.equal(isSecurityOrigin("Debian-Security:12/oldstable-security"), true);
  assert.equal(isSecurityOrigin("Debian:12/bookworm-updates"), false);
});

test("lock holders as apt and dnf report them", () => {
  const apt = aptLockHolder({
    code: 100,
    signal: null,
    stdout: "",
    stderr:
      "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)\nE: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?\n",
  });
  assert.deepEqual(apt, { lock: "/var/lib/dpkg/lock-frontend", pid: 4242, name: "unattended-upgr" });
  assert.equal(
    aptLockHolder({ code: 100, signal: null, stdout: "", stderr: "E: Unable to locate package x\n" }),
    undefined,
  );
  const dnf = dnfLockHolder({
    code: 200,
    signal: null,
    stdout: "",
    stderr: "metadata already locked by 77\n  The application with PID 77 is: dnf\n    Memory : 1 M\n",
  });
  assert.deepEqual(dnf, { lock: "the dnf metadata lock", pid: 77, name: "dnf" });
  assert.deepEqual(
    advisoryPackages(
      "RHSA-2024:1 Important/Sec. openssl-1:3.0.7-25.el9_3.x86_64\nFEDORA-2024-2 bugfix curl-8.2.1-3.fc39.x86_64\n",
    ),
    [
      { id: "RHSA-2024:1", security: true, nevra: "openssl-1:3.0.7-25.el9_3.x86_64" },
      { id: "FEDORA-2024-2", security: false, nevra: "curl-8.2.1-3.fc39.x86_64" },
    ],
  );
  assert.equal(nevraKey("openssl-1:3.0.7-25.el9_3.x86_64"), "openssl\u0000x86_64");
  assert.equal(
    nevraKey("python3-dnf-plugin-versionlock-4.3.0-13.el9.noarch"),
    "python3-dnf-plugin-versionlock\u0000noarch",
  );
});

test("dnf updateinfo info blocks become advisories, whatever their descriptions and titles hold", () => {
  const text = [
    "===============================================================================",
    "  Important: openssl security update",
    "===============================================================================",
    "  Update ID: RHSA-2024:0310",
    "       Type: security",
    "    Updated: 2024-01-22 09:10:11",
    "       Bugs: 2248379 - CVE-2023-5678 openssl: Generating excessively long X9.42 DH keys",
    "           : 2259944 - CVE-2024-0727 openssl: denial of service via null dereference",
    "       CVEs: CVE-2023-5678",
    "           : CVE-2024-0727",
    "           : CVE-2023-5678",
    "Description: OpenSSL is a toolkit.",
    "           : ",
    "           : Security Fix(es):",
    "           : Severity: not this one",
    "           : * openssl: CVE-2099-0001 in a description is no reference",
    "   Severity: Important",
    "",
    "===============================================================================",
    "  curl bug fix",
    "===============================================================================",
    "  Update ID: FEDORA-2024-2",
    "       Type: bugfix",
    "    Updated: 1970-01-01 00:00:00",
    "Description: Fixes.",
    "   Severity: None",
  ].join("\n");
  assert.deepEqual(Object.fromEntries(parseUpdateInfo(text)), {
    "RHSA-2024:0310": {
      id: "RHSA-2024:0310",
      type: "security",
      severity: "important",
      cves: ["CVE-2023-5678", "CVE-2024-0727"],
      issued: "2024-01-22T09:10:11Z",
    },
    "FEDORA-2024-2": { id: "FEDORA-2024-2", type: "bugfix", severity: "unknown", cves: [], issued: null },
  });
  assert.deepEqual(
    Object.fromEntries(
      parseVersionLocks(
        "# comment\nopenssl-1:3.0.7-25.el9_3.*\n!curl-0:8.2.1-3.fc39.*\nkernel-core-0:5.14.0-362.el9.*\n",
      ),
    ),
    { openssl: "3.0.7-25.el9_3", "kernel-core": "5.14.0-362.el9" },
  );
});

test("auto picks the package manager from os-release, then from what is installed", () => {
  const none = () => false;
  assert.equal(detectPackageManager('ID=debian\nVERSION_ID="12"\n', none), "apt");
  assert.equal(detectPackageManager("ID=ubuntu\nID_LIKE=debian\n", none), "apt");
  assert.equal(detectPackageManager('ID="almalinux"\nID_LIKE="rhel centos fedora"\n', none), "dnf");
  assert.equal(detectPackageManager('ID="rocky"\nID_LIKE="rhel centos fedora"\n', none), "dnf");
  assert.equal(detectPackageManager("ID=fedora\n", none), "dnf");
  assert.equal(
    detectPackageManager("ID=arch\n", (p) => p === "dnf"),
    "dnf",
  );
  assert.equal(
    detectPackageManager(undefined, (p) => p === "apt-get"),
    "apt",
  );
  assert.equal(detectPackageManager("ID=arch\n", none), undefined);
});

test("apt hosts: needrestart's kernel status counts as a required reboot", async (t) => {
  // needrestart cannot be made to see a pending kernel here; a stand-in prints what it prints in batch mode.
  const dir = mkdtempSync(join(tmpdir(), "hk-needrestart-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const fake = join(dir, "needrestart");
  const apt = (needrestart: string | undefined) =>
    new AptPackageManager({
      env: process.env,
      aptConfig: undefined,
      hold: [],
      rebootRequiredFile: join(dir, "reboot-required"),
      needrestart,
      changelogTimeoutMs: 0,
      lockTimeoutMs: 1000,
      commandTimeoutMs: 5000,
    });
  for (const [ksta, expected] of [
    ["1", false],
    ["2", true],
    ["3", true],
  ] as const) {
    writeFileSync(
      fake,
      `#!/bin/sh\n[ "$*" = "-b -k" ] || exit 9\necho NEEDRESTART-VER: 3.6\necho NEEDRESTART-KSTA: ${ksta}\n`,
    );
    chmodSync(fake, 0o755);
    assert.equal(await apt(fake).rebootRequired(), expected, `KSTA ${ksta}`);
  }
  assert.equal(await apt(join(dir, "not-installed")).rebootRequired(), false);
  writeFileSync(join(dir, "reboot-required"), "");
  assert.equal(await apt(undefined).rebootRequired(), true, "the flag file alone");
});

test("the mutex runs one at a time, in order, and a waiter gives up after its time-out", async () => {
  const m = new Mutex();
  const order: string[] = [];
  const busy = () => new Error("busy");
  // a holds the lock until c has given up waiting for it.
  let cGaveUp = () => {};
  const cDone = new Promise<void>((resolve) => {
    cGaveUp = resolve;
  });
  const a = m.run(1000, busy, async () => {
    order.push("a start");
    await cDone;
    order.push("a end");
  });
  const b = m.run(1000, busy, async () => {
    order.push("b");
  });
  const c = m.run(20, busy, async () => {
    order.push("c");
  });
  await assert.rejects(c, /busy/);
  cGaveUp();
  await Promise.all([a, b]);
  assert.deepEqual(order, ["a start", "a end", "b"]);
  await m.run(10, busy, async () => order.push("free again"));
  assert.equal(order.at(-1), "free again");
});

test("progress from apt's status lines and dnf's output: downloads, then packages installed of the planned total", () => {
  const seen: string[] = [];
  const record = (p: { phase: string; done: number; total: number; current?: string }) =>
    seen.push(`${p.phase} ${p.done}/${p.total} ${p.current ?? "-"}`);
  const apt = aptProgress(record);
  apt("2 upgraded, 1 newly installed, 0 to remove and 0 not upgraded.", "stdout");
  apt("dlstatus:1:0.0000:Retrieving file 1 of 3", "status");
  apt("Get:1 http://127.0.0.1:8080/debian bookworm-updates/main amd64 labc all 1.0 [610 B]", "stdout");
  apt("dlstatus:3:66.5235:Retrieving file 3 of 3", "status");
  apt("dlstatus:3:100.0000:Retrieving file 3 of 3", "status");
  apt("pmstatus:dpkg-exec:0.0000:Running dpkg", "status");
  apt("pmstatus:laba:7.6923:Unpacking laba (amd64)", "status");
  apt("pmstatus:laba:61.5385:Installed laba (amd64)", "status");
  apt("pmstatus:labc:76.9231:Installed labc (amd64)", "status");
  apt("Setting up labb (1.1) ...", "stdout");
  apt("pmstatus:labb:92.3077:Installed labb (amd64)", "status");
  assert.deepEqual(seen, [
    "downloading 0/3 -",
    "downloading 0/3 labc",
    "downloading 2/3 labc",
    "downloading 3/3 labc",
    "installing 0/3 -",
    "installing 0/3 laba",
    "installing 1/3 laba",
    "installing 2/3 labc",
    "installing 3/3 labb",
  ]);

  seen.length = 0;
  const dnf = dnfProgress(record);
  for (const line of [
    "Install  1 Package",
    "Upgrade  2 Packages",
    "(1/3): labc-1.0-1.noarch.rpm                    1.7 MB/s | 5.9 kB     00:00",
    "(3/3): labb-1.1-1.noarch.rpm                    1.1 MB/s | 5.9 kB     00:00",
    "[SKIPPED] laba-1.1-1.noarch.rpm: Already downloaded",
    "Running transaction",
    "  Preparing        :                                                        1/1",
    "  Installing       : labc-1.0-1.noarch                                      1/5",
    "  Upgrading        : labb-1.1-1.noarch                                      2/5",
    "  Upgrading        : laba-1.1-1.noarch                                      3/5",
    "  Cleanup          : labb-1.0-1.noarch                                      4/5",
    "  Verifying        : labc-1.0-1.noarch                                      1/5",
  ])
    dnf(line);
  assert.deepEqual(seen, [
    "downloading 1/3 labc-1.0-1.noarch",
    "downloading 3/3 labb-1.1-1.noarch",
    "installing 0/3 -",
    "installing 1/3 labc-1.0-1.noarch",
    "installing 2/3 labb-1.1-1.noarch",
    "installing 3/3 laba-1.1-1.noarch",
  ]);
  assert.equal(
    dnfCacheDir("[main]\ngpgcheck=0\ncachedir = /var/cache/x\n[repo]\ncachedir=/no\n"),
    "/var/cache/x",
  );
  assert.equal(dnfCacheDir("[main]\n"), "/var/cache/dnf");
});
