import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, type TestContext, test } from "node:test";
import { buildTestApp, TEST_TOKEN } from "../helpers/app.js";
import { buildRpmRepo, createDnfRoot, type RpmSpec } from "../helpers/dnf-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";
import { serveDirectory, startReceiver } from "../helpers/http.js";
import { alive, request, startAgent } from "../helpers/serve.js";
import { waitFor } from "../helpers/wait.js";

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

/** labsec: a security update; labreg: a regular one; labkernel pulls in labfirmware. */
const RPMS: RpmSpec[] = [
  { name: "hk-release", version: "9", provides: "system-release(releasever) = 9" },
  ...["labsec", "labreg", "labkernel"].map((name) => ({ name, version: "1.0" })),
  { name: "labsec", version: "1.1" },
  { name: "labreg", version: "1.1" },
  { name: "labkernel", version: "1.1", requires: "labfirmware" },
  { name: "labfirmware", version: "1.0" },
];
const INITIAL = ["hk-release", ...["labsec", "labreg", "labkernel"].map((n) => `${n}-1.0`)];

let repo: string;
before(async () => {
  repo = await buildRpmRepo({ after: () => {} }, RPMS, [
    { id: "HK-SA-2024:0001", type: "security", packages: [{ name: "labsec", version: "1.1" }] },
  ]);
});
test.after(() => rmSync(repo, { recursive: true, force: true }));

/** An install root whose repository is served over loopback HTTP (so dnf downloads into its cache). */
async function setup(t: TestContext) {
  const root = await createDnfRoot(t, repo, INITIAL);
  const mirror = await serveDirectory(t, repo);
  writeFileSync(
    join(root.root, "etc/yum.repos.d/test.repo"),
    `[test]\nname=test\nbaseurl=${mirror.url}/\ngpgcheck=0\nenabled=1\nmetadata_expire=0\n`,
  );
  const dir = mkdtempSync(join(tmpdir(), "hk-dnf-async-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "boot_id"), "44444444-4444-4444-8444-444444444444\n");
  writeFileSync(join(dir, "osrelease"), "5.14.0-362.el9.x86_64\n");
  const env = {
    HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
    HOSTKEEPER_PACKAGE_MANAGER: "dnf",
    HOSTKEEPER_DNF_INSTALLROOT: root.root,
    HOSTKEEPER_REBOOT_COMMAND: "/bin/false",
    HOSTKEEPER_BOOT_ID_FILE: join(dir, "boot_id"),
    HOSTKEEPER_KERNEL_RELEASE_FILE: join(dir, "osrelease"),
  };
  const dataDir = mkdtempSync(join(tmpdir(), "hk-data-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const start = () => buildTestApp(t, env, { dataDir });
  return { root, mirror, env, dataDir, start };
}

test("dnf: download-updates fills dnf's cache without installing; the async apply after it only installs, its states reported in order", async (t) => {
  const { root, mirror, start } = await setup(t);
  const { call } = await start();
  const before = await root.installed();
  const r = await call({
    method: "POST",
    url: "/v1/system/download-updates",
    payload: { update_type: "full" },
  });
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  assert.equal(body.package_manager, "dnf");
  assert.deepEqual(
    body.downloaded.map((f: { file: string }) => f.file),
    [
      "labfirmware-1.0-1.noarch.rpm",
      "labkernel-1.1-1.noarch.rpm",
      "labreg-1.1-1.noarch.rpm",
      "labsec-1.1-1.noarch.rpm",
    ],
  );
  assert.ok(body.downloaded.every((f: { bytes: number }) => f.bytes > 0));
  assert.equal(
    body.bytes,
    body.downloaded.reduce((n: number, f: { bytes: number }) => n + f.bytes, 0),
  );
  assert.deepEqual(await root.installed(), before, "nothing installed");

  mirror.refusePackages(true);
  const receiver = await startReceiver(t);
  const apply = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", callback_url: receiver.url },
    headers: { prefer: "respond-async" },
  });
  assert.equal(apply.statusCode, 202, apply.body);
  const id = apply.json().id;
  const done = await waitFor("the apply to end", async () => {
    const s = (await call({ method: "GET", url: `/v1/system/applies/${id}` })).json();
    return ["completed", "failed"].includes(s.state) ? s : undefined;
  });
  assert.equal(done.state, "completed", JSON.stringify(done.error));
  assert.deepEqual(done.progress, {
    download: { done: 0, total: 0 },
    install: { done: 4, total: 4 },
    current: null,
  });
  assert.deepEqual(done.upgraded.map((p: { name: string }) => p.name).sort(), [
    "labkernel",
    "labreg",
    "labsec",
  ]);
  await receiver.waitFor(4, 15_000);
  assert.deepEqual(
    receiver.received.map((w) => w.json.data.state),
    ["queued", "downloading", "installing", "completed"],
  );
});

/** PIDs of the processes with `arg` on their command line. */
function pidsWithArgument(arg: string): number[] {
  return readdirSync("/proc")
    .filter((e) => /^\d+$/.test(e))
    .filter((e) => {
      try {
        return readFileSync(`/proc/${e}/cmdline`, "utf8").split("\0").includes(arg);
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** Kills the process group `pid` leads (the agent starts each package-manager command as a group leader). */
function killGroup(pid: number): void {
  try {
    process.kill(-pid, "SIGKILL");
  } catch {
    // gone meanwhile
  }
}

test("dnf: after an apply cut short by a stop of the agent, the next apply reports dnf's check and history and goes on", async (t) => {
  const { root, mirror, env, dataDir, start } = await setup(t);
  let release = () => {};
  mirror.holdPackages(new Promise<void>((r) => (release = r)));
  t.after(() => release());
  const agent = await startAgent(t, { ...env, HOSTKEEPER_DATA_DIR: dataDir, HOSTKEEPER_TOKEN: TEST_TOKEN });
  const r = await request(
    agent.port,
    "POST",
    "/v1/system/apply-updates",
    TEST_TOKEN,
    { update_type: "security" },
    { prefer: "respond-async" },
  );
  assert.equal(r.status, 202, r.body);
  const id = JSON.parse(r.body).id as number;
  // dnf is downloading (the mirror holds the package back) when the agent is killed.
  await waitFor("dnf to ask for a package", () =>
    mirror.asked.some((p) => p.endsWith(".rpm")) ? true : undefined,
  );
  // As systemd stops the agent's unit: the agent and the dnf it started (its own process group) at once.
  const dnf = pidsWithArgument(`--installroot=${root.root}`);
  assert.ok(dnf.length > 0, "dnf runs");
  agent.child.kill("SIGKILL");
  await agent.exited;
  for (const pid of dnf) killGroup(pid);
  await waitFor("dnf to be gone", () => (dnf.some(alive) ? undefined : true));
  release();
  mirror.holdPackages(undefined);

  const { call } = await start();
  const interrupted = (await call({ method: "GET", url: `/v1/system/applies/${id}` })).json();
  assert.equal(interrupted.state, "interrupted");
  const next = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(next.statusCode, 200, next.body);
  assert.deepEqual(
    next.json().upgraded.map((p: { name: string }) => p.name),
    ["labsec"],
  );
  const s = (await call({ method: "GET", url: `/v1/system/applies/${next.json().id}` })).json();
  assert.equal(s.recovery.action, "reported");
  assert.match(s.recovery.detail, /last dnf transaction \d+: return code/);
  assert.match(s.recovery.detail, /dnf check found no problem/);
  assert.equal((await root.installed()).labsec, "1.1-1");
});

test("the host's own package state is untouched", () => {
  assert.deepEqual(hostPackageState(), hostBefore);
});
