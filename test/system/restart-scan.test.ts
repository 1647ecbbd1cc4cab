import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { parseMaps, scanProcesses, unitOfCgroup } from "../../src/system/restarts/restart-scan.js";
import { parseRestartOutput } from "../../src/system/restarts/services-restart.js";
import { buildTestApp } from "../helpers/app.js";
import { aptAgentEnv, buildAptRepo, createAptSandbox, debianArch } from "../helpers/apt-sandbox.js";
import { buildRpmRepo, createDnfRoot } from "../helpers/dnf-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";
import { waitFor } from "../helpers/wait.js";

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

type After = { after: (fn: () => unknown) => void };

const tempDir = (t: After, prefix: string) => {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
};

/** A device as maps prints it (`fe:01`) and as mountinfo does (`254:1`). */
function deviceOf(path: string): { hex: string; decimal: string } {
  const dev = statSync(path).dev;
  const major = Math.floor(dev / 256) & 0xfff;
  const minor = (dev & 0xff) | (Math.floor(dev / 4096) & 0xfff00);
  return {
    hex: `${major.toString(16).padStart(2, "0")}:${minor.toString(16).padStart(2, "0")}`,
    decimal: `${major}:${minor}`,
  };
}

test("maps: file-backed mappings once per file; anonymous, memfd, SysV shm and device mappings left out", () => {
  const maps = [
    "55f7a79d5000-55f7a79d7000 r--p 00000000 fe:00 2155115                    /usr/bin/app (deleted)",
    "55f7a79d7000-55f7a79dc000 r-xp 00002000 fe:00 2155115                    /usr/bin/app (deleted)",
    "7f00a0000000-7f00a0021000 rw-p 00000000 00:00 0 ",
    "7f00a1000000-7f00a1021000 rw-p 00000000 00:00 0                          [heap]",
    "7f00a2000000-7f00a2001000 r-xp 00000000 fe:00 339380                     /usr/lib/libc.so.6",
    "7f00a3000000-7f00a3001000 rw-s 00000000 00:01 1031                       /memfd:wayland-shm (deleted)",
    "7f00a4000000-7f00a4001000 rw-s 00000000 00:01 32769                      /SYSV0000162e (deleted)",
    "7f00a5000000-7f00a5001000 rw-s 00000000 00:05 12                         /dev/dri/card0",
    "7f00a6000000-7f00a6001000 rw-s 00000000 00:01 2049                       /dev/zero (deleted)",
    "7f00a7000000-7f00a7001000 rw-s 00000000 00:1a 77                         /dev/shm/pulse-shm-1 (deleted)",
    "7f00a8000000-7f00a8001000 r--p 00000000 fe:00 4242                       /opt/odd\\012name.so",
    "7fff00000000-7fff00001000 r-xp 00000000 00:00 0                          [vdso]",
  ].join("\n");
  assert.deepEqual(parseMaps(maps), [
    { path: "/usr/bin/app", device: "fe:00", inode: 2155115, deleted: true },
    { path: "/usr/lib/libc.so.6", device: "fe:00", inode: 339380, deleted: false },
    { path: "/dev/shm/pulse-shm-1", device: "00:1a", inode: 77, deleted: true },
    { path: "/opt/odd\nname.so", device: "fe:00", inode: 4242, deleted: false },
  ]);
});

test("cgroup: the innermost service of the systemd path, v2 or v1; null outside any service", () => {
  assert.equal(unitOfCgroup("0::/system.slice/cron.service\n"), "cron.service");
  assert.equal(
    unitOfCgroup("0::/user.slice/user-1000.slice/user@1000.service/app.slice/syncthing.service\n"),
    "syncthing.service",
  );
  // Hybrid and v1 hosts: the name=systemd hierarchy is systemd's own.
  assert.equal(
    unitOfCgroup("12:pids:/system.slice/ssh.service\n1:name=systemd:/system.slice/ssh.service\n0::/\n"),
    "ssh.service",
  );
  assert.equal(unitOfCgroup("0::/user.slice/user-1000.slice/session-3.scope\n"), null);
  assert.equal(unitOfCgroup("0::/init.scope\n"), null);
  assert.equal(unitOfCgroup("0::/\n"), null);
  assert.equal(unitOfCgroup("4:memory:/docker/abc\n"), null);
  assert.equal(unitOfCgroup(""), null);
});

test("a restart command's output: units without processes or files, plain pids as a process of no unit", () => {
  assert.deepEqual(
    parseRestartOutput(
      "NEEDRESTART-VER: 3.6\nNEEDRESTART-KSTA: 1\nNEEDRESTART-SVC: ssh.service\nNEEDRESTART-SVC: cron.service\n",
    ),
    [
      { unit: "cron.service", pids: [], files: [] },
      { unit: "ssh.service", pids: [], files: [] },
    ],
  );
  assert.deepEqual(parseRestartOutput("cron.service\nsshd.service\n\ncron.service\n"), [
    { unit: "cron.service", pids: [], files: [] },
    { unit: "sshd.service", pids: [], files: [] },
  ]);
  assert.deepEqual(parseRestartOutput("1234 : /usr/bin/python3 app.py\n88 : /usr/sbin/rsyslogd -n\n"), [
    { unit: null, pids: [88, 1234], files: [] },
  ]);
  assert.deepEqual(parseRestartOutput("NEEDRESTART-VER: 3.6\n"), []);
});

/** A fabricated /proc: each process a folder with maps, cgroup, mountinfo, ns/mnt and a root link. */
function fakeProc(t: After) {
  const base = tempDir(t, "hk-proc-");
  const fsroot = join(base, "fsroot");
  const proc = join(base, "proc");
  mkdirSync(join(fsroot, "usr/lib"), { recursive: true });
  writeFileSync(join(fsroot, "usr/lib/libkept.so"), "kept");
  writeFileSync(join(fsroot, "usr/lib/libswapped.so"), "new version");
  const dev = deviceOf(fsroot);
  const mountinfo = `22 1 ${dev.decimal} / / rw,relatime shared:1 - ext4 /dev/vda rw\n`;
  const line = (inode: number, path: string, device = dev.hex) =>
    `7f0000000000-7f0000001000 r-xp 00000000 ${device} ${inode}          ${path}`;
  const add = (
    pid: number | "self",
    maps: string[],
    cgroup: string,
    o: { mountNs?: string; mountinfo?: boolean; root?: string } = {},
  ) => {
    const dir = join(proc, String(pid));
    mkdirSync(join(dir, "ns"), { recursive: true });
    writeFileSync(join(dir, "maps"), maps.map((l) => `${l}\n`).join(""));
    writeFileSync(join(dir, "cgroup"), cgroup);
    if (o.mountinfo !== false) writeFileSync(join(dir, "mountinfo"), mountinfo);
    symlinkSync(o.root ?? fsroot, join(dir, "root"));
    symlinkSync(o.mountNs ?? "mnt:[4026531840]", join(dir, "ns", "mnt"));
  };
  const ino = (path: string) => statSync(join(fsroot, path)).ino;
  return { base, proc, add, line, ino };
}

test("scan of a fabricated /proc: replaced and deleted files by unit, kernel memory and unchanged files left out", async (t) => {
  const { base, proc, add, line, ino } = fakeProc(t);
  const kept = ino("usr/lib/libkept.so");
  // 100 and 105: cron.service, one with a deleted executable, one with a library replaced in place (its
  // path now leads to another inode) and an unchanged one; an AIO ring on a filesystem mounted nowhere.
  add(
    100,
    [line(9001, "/usr/sbin/cron (deleted)"), line(kept, "/usr/lib/libkept.so")],
    "0::/system.slice/cron.service\n",
  );
  add(
    105,
    [line(ino("usr/lib/libswapped.so") + 1, "/usr/lib/libswapped.so"), line(4, "/[aio] (deleted)", "00:0f")],
    "0::/system.slice/cron.service\n",
  );
  // 101: a user's service on a hybrid cgroup host; its file is gone from the path without the kernel's mark.
  add(
    101,
    [line(9002, "/usr/lib/libvanished.so")],
    "1:name=systemd:/user.slice/user-1000.slice/user@1000.service/app.slice/sync.service\n0::/\n",
  );
  // 102: a login session; 103: a kernel thread (no mappings); 104: nothing replaced.
  add(102, [line(9003, "/usr/bin/bash (deleted)")], "0::/user.slice/user-1000.slice/session-3.scope\n");
  add(103, [], "0::/\n");
  add(
    104,
    [line(kept, "/usr/lib/libkept.so"), line(7, "/memfd:x (deleted)")],
    "0::/system.slice/ok.service\n",
  );
  // 106: in a mount namespace whose mountinfo cannot be read: no device is left out there.
  add(106, [line(9004, "/usr/bin/tool (deleted)", "00:2a")], "0::/\n", {
    mountNs: "mnt:[4026532001]",
    mountinfo: false,
  });
  mkdirSync(join(proc, "107"));
  // 108 ended during the scan: its root leads nowhere any more, so its paths find nothing.
  add(108, [line(kept, "/usr/lib/libkept.so")], "0::/system.slice/cron.service\n");
  rmSync(join(proc, "108", "root"));
  symlinkSync(join(proc, "108", "gone"), join(proc, "108", "root"));
  // 109 chrooted into an empty folder after mapping its library (as sshd's privilege separation does):
  // maps names the file from the scanner's root, where it is unchanged.
  mkdirSync(join(base, "empty"));
  add(109, [line(kept, "/usr/lib/libkept.so")], "0::/system.slice/ssh.service\n", {
    root: join(base, "empty"),
  });
  // 110, in a container (a namespace and root of its own), maps its own libkept.so: found there, unchanged,
  // though the scanner's root has another file at that path.
  const container = join(base, "container");
  mkdirSync(join(container, "usr/lib"), { recursive: true });
  writeFileSync(join(container, "usr/lib/libkept.so"), "the container's");
  const own = statSync(join(container, "usr/lib/libkept.so")).ino;
  add(110, [line(own, "/usr/lib/libkept.so")], "0::/system.slice/docker.service\n", {
    mountNs: "mnt:[4026532002]",
    root: container,
  });
  // The scanner itself: its root is the fabricated one.
  add("self", [], "0::/\n");

  assert.deepEqual(await scanProcesses(proc), [
    { unit: "cron.service", pids: [100, 105], files: ["/usr/lib/libswapped.so", "/usr/sbin/cron"] },
    { unit: "sync.service", pids: [101], files: ["/usr/lib/libvanished.so"] },
    { unit: null, pids: [102, 106], files: ["/usr/bin/bash", "/usr/bin/tool"] },
  ]);
});

async function stopByPid(child: ChildProcess): Promise<void> {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, "exit");
  process.kill(child.pid, "SIGKILL");
  await exited;
}

/** Starts a program and stops it by its PID when the test ends. */
async function start(t: After, file: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<number> {
  const child = spawn(file, args, { stdio: "ignore", env: { PATH: process.env.PATH, ...env } });
  t.after(() => stopByPid(child));
  await once(child, "spawn");
  return child.pid as number;
}

/** Replaces `path` the way package managers do: a new file written aside, renamed over the old one. */
function replace(path: string, content: Buffer): void {
  writeFileSync(`${path}.new`, content, { mode: 0o755 });
  renameSync(`${path}.new`, path);
}

const mapsOf = (pid: number) => readFileSync(`/proc/${pid}/maps`, "utf8");

test("scan of this host: a copied executable and a copied library, both replaced, are found by pid and file", async (t) => {
  const dir = tempDir(t, "hk-restart-");
  const sleep = join(dir, "hk-sleep");
  copyFileSync("/bin/sleep", sleep);
  // libdl is a small stub of glibc's, beside libc wherever this system keeps it.
  const probe = await start(t, "/bin/sleep", ["600"]);
  const libc = await waitFor("sleep to map libc", () => /\s(\/\S+\/libc\.so\.6)$/m.exec(mapsOf(probe))?.[1]);
  const lib = join(dir, "libhk.so");
  copyFileSync(join(dirname(libc), "libdl.so.2"), lib);

  const exePid = await start(t, sleep, ["600"]);
  const libPid = await start(t, "/bin/sleep", ["600"], { LD_PRELOAD: lib });
  await waitFor("the copies to be mapped", () =>
    mapsOf(exePid).includes(sleep) && mapsOf(libPid).includes(lib) ? true : undefined,
  );
  const mine = (found: Awaited<ReturnType<typeof scanProcesses>>) =>
    found.filter((s) => s.pids.includes(exePid) || s.pids.includes(libPid));
  // Other processes of this host may be listed (with ours, when they share its cgroup): not ours yet.
  assert.deepEqual(mine(await scanProcesses()), [], "nothing of ours replaced yet");

  replace(sleep, readFileSync("/bin/sleep"));
  replace(lib, readFileSync(lib));
  const found = mine(await scanProcesses());
  const pids = found.flatMap((s) => s.pids);
  const files = found.flatMap((s) => s.files);
  assert.ok(pids.includes(exePid) && pids.includes(libPid), JSON.stringify(found));
  assert.ok(files.includes(sleep) && files.includes(lib), JSON.stringify(found));
  // The processes run in this test's own cgroup: their unit is what it says.
  const unit = unitOfCgroup(readFileSync(`/proc/${exePid}/cgroup`, "utf8"));
  const exeGroup = found.find((s) => s.pids.includes(exePid));
  assert.equal(exeGroup?.unit, unit);
  assert.equal(
    found.find((s) => s.pids.includes(libPid))?.unit,
    unitOfCgroup(readFileSync(`/proc/${libPid}/cgroup`, "utf8")),
  );
});

/** A copy of sleep, running, then replaced: a process the scan must report. */
async function replacedProcess(t: After): Promise<{ pid: number; file: string }> {
  const file = join(tempDir(t, "hk-restart-"), "hk-sleep");
  copyFileSync("/bin/sleep", file);
  const pid = await start(t, file, ["600"]);
  await waitFor("the copy to be mapped", () => (mapsOf(pid).includes(file) ? true : undefined));
  replace(file, readFileSync("/bin/sleep"));
  return { pid, file };
}

type Found = { unit: string | null; pids: number[]; files: string[] }[];
const lists = (found: Found, p: { pid: number; file: string }) =>
  found.some((s) => s.pids.includes(p.pid) && s.files.includes(p.file));

test("apt: check-updates and apply-updates list the processes running replaced files; older unit names read back as units; none turns it off", async (t) => {
  const repo = await buildAptRepo(
    t,
    [
      { name: "rsa", version: "1.0", suites: ["bookworm"] },
      { name: "rsa", version: "1.1", suites: ["bookworm-security"] },
    ],
    debianArch(),
  );
  const sandbox = await createAptSandbox(t, repo, { install: ["rsa=1.0"] });
  const env = {
    ...aptAgentEnv(sandbox),
    HOSTKEEPER_REBOOT_COMMAND: "true",
  };
  const { call, dataDir } = await buildTestApp(t, env);
  const replaced = await replacedProcess(t);
  const check = await call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(check.statusCode, 200, check.body);
  assert.ok(lists(check.json().services_restart_required, replaced), check.body);
  const apply = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(apply.statusCode, 200, apply.body);
  assert.ok(lists(apply.json().services_restart_required, replaced), apply.body);
  const status = await call({ method: "GET", url: `/v1/system/applies/${apply.json().id}` });
  assert.ok(lists(status.json().services_restart_required, replaced), status.body);

  // An apply recorded before the scan holds needrestart's unit names: they read back as units.
  const db = new Database(join(dataDir, "hostkeeper.db"));
  const id = apply.json().id;
  const row = db.prepare("SELECT result FROM system_applies WHERE id = ?").get(id) as { result: string };
  const old = { ...JSON.parse(row.result), services_restart_required: ["cron.service"] };
  db.prepare("UPDATE system_applies SET result = ? WHERE id = ?").run(JSON.stringify(old), id);
  db.close();
  const units = [{ unit: "cron.service", pids: [], files: [] }];
  const before = await call({ method: "GET", url: `/v1/system/applies/${id}` });
  assert.deepEqual(before.json().services_restart_required, units);
  const [record] = (await call({ method: "GET", url: "/v1/system/apply-history" })).json().applies;
  assert.deepEqual(record.services_restart_required, units);

  const off = await buildTestApp(t, { ...env, HOSTKEEPER_SERVICES_RESTART_COMMAND: "none" });
  const unasked = await off.call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(unasked.json().services_restart_required, null);
});

test("dnf: check-updates lists the processes running replaced files", async (t) => {
  const repo = await buildRpmRepo(
    t,
    [
      { name: "hk-release", version: "9", provides: "system-release(releasever) = 9" },
      { name: "rsd", version: "1.0" },
      { name: "rsd", version: "1.1" },
    ],
    [],
  );
  const root = await createDnfRoot(t, repo, ["hk-release", "rsd-1.0"]);
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
    HOSTKEEPER_PACKAGE_MANAGER: "dnf",
    HOSTKEEPER_DNF_INSTALLROOT: root.root,
    HOSTKEEPER_REBOOT_COMMAND: "true",
  });
  const replaced = await replacedProcess(t);
  const check = await call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(check.statusCode, 200, check.body);
  assert.ok(lists(check.json().services_restart_required, replaced), check.body);
});

test("restart scan: the host's own package state is untouched", () => {
  assert.deepEqual(hostPackageState(), hostBefore);
});
