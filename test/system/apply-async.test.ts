import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, type TestContext, test } from "node:test";
import { buildTestApp, TEST_SECRET, TEST_TOKEN } from "../helpers/app.js";
import {
  type AptRepo,
  aptAgentEnv,
  buildAptRepo,
  createAptSandbox,
  type DebSpec,
  debianArch,
  REBOOT_FLAG_POSTINST,
  waitingPostinst,
} from "../helpers/apt-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";
import { serveDirectory, startReceiver, verifyStandardWebhook } from "../helpers/http.js";
import { exec, rebootMarker } from "../helpers/processes.js";
import { alive, request, startAgent } from "../helpers/serve.js";
import { waitFor } from "../helpers/wait.js";

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

/**
 * labsec: a security update. labreg: a regular one. labkernel: a regular update that flags a reboot and pulls
 * in labfirmware. labslow: a regular update whose postinst waits for the test.
 */
const DEBS: DebSpec[] = [
  ...["labsec", "labreg", "labkernel", "labslow"].map(
    (name): DebSpec => ({ name, version: "1.0", suites: ["bookworm"] }),
  ),
  { name: "labsec", version: "1.1", suites: ["bookworm-security"] },
  { name: "labreg", version: "1.1", suites: ["bookworm-updates"] },
  { name: "labfirmware", version: "1.0", suites: ["bookworm-updates"] },
  {
    name: "labkernel",
    version: "1.1",
    suites: ["bookworm-updates"],
    depends: "labfirmware",
    postinst: REBOOT_FLAG_POSTINST,
  },
  { name: "labslow", version: "1.1", suites: ["bookworm-updates"], postinst: waitingPostinst("labslow") },
];
const INITIAL = ["labsec", "labreg", "labkernel", "labslow"].map((n) => `${n}=1.0`);

let repo: AptRepo;
before(async () => {
  repo = await buildAptRepo({ after: () => {} }, DEBS, debianArch());
});
test.after(() => rmSync(repo.dir, { recursive: true, force: true }));

/** A sandbox whose sources are the repository served over loopback HTTP (so apt downloads into its cache). */
async function setup(t: TestContext, env: Record<string, string> = {}) {
  const mirror = await serveDirectory(t, repo.dir);
  const sandbox = await createAptSandbox(t, repo, {
    install: INITIAL,
    sourcesList: repo.sourcesList.replaceAll(`file:${repo.dir}`, mirror.url),
  });
  writeFileSync(join(sandbox.root, "release-labslow"), "");
  const dir = mkdtempSync(join(tmpdir(), "hk-async-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const boot = {
    idFile: join(dir, "boot_id"),
    kernelFile: join(dir, "osrelease"),
    set(id: string, kernel: string) {
      writeFileSync(this.idFile, `${id}\n`);
      writeFileSync(this.kernelFile, `${kernel}\n`);
    },
  };
  boot.set("11111111-1111-4111-8111-111111111111", "6.1.0-17-amd64");
  const reboot = rebootMarker(dir);
  const agentEnv = {
    ...aptAgentEnv(sandbox),
    HOSTKEEPER_REBOOT_COMMAND: reboot.command,
    HOSTKEEPER_REBOOT_DELAY_MS: "100",
    HOSTKEEPER_BOOT_ID_FILE: boot.idFile,
    HOSTKEEPER_KERNEL_RELEASE_FILE: boot.kernelFile,
    HOSTKEEPER_WEBHOOK_RETRY_SCHEDULE: "1,1,1",
    ...env,
  };
  const dataDir = mkdtempSync(join(tmpdir(), "hk-data-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const start = () => buildTestApp(t, agentEnv, { dataDir });
  return { ...(await start()), sandbox, mirror, boot, reboot, agentEnv, start };
}

type Call = Awaited<ReturnType<typeof setup>>["call"];
const statusOf = async (call: Call, id: number) => {
  const r = await call({ method: "GET", url: `/v1/system/applies/${id}` });
  assert.equal(r.statusCode, 200, r.body);
  return r.json();
};

test("an async apply answers 202 at once and goes through its states, each reported to its callback in order; a new boot makes it back_online", async (t) => {
  const h = await setup(t);
  const receiver = await startReceiver(t);
  const r = await h.call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", auto_reboot: true, callback_url: receiver.url },
    headers: { prefer: 'handling=lenient, RESPOND-ASYNC; x="a,b"' },
  });
  assert.equal(r.statusCode, 202, r.body);
  const accepted = r.json();
  assert.equal(accepted.state, "queued");
  assert.equal(r.headers.location, `/v1/system/applies/${accepted.id}`);
  assert.equal(r.headers["preference-applied"], "respond-async");
  assert.deepEqual(accepted.progress, { download: null, install: null, current: null });

  const rebooting = await waitFor("the apply to reach rebooting", async () => {
    const s = await statusOf(h.call, accepted.id);
    assert.notEqual(s.state, "failed", JSON.stringify(s.error));
    return s.state === "rebooting" ? s : undefined;
  });
  await waitFor("the reboot command", () => h.reboot.ranAt());
  assert.deepEqual(
    rebooting.history.map((e: { state: string }) => e.state),
    ["queued", "downloading", "installing", "reboot_scheduled", "rebooting"],
  );
  assert.deepEqual(rebooting.upgraded.map((p: { name: string; to: string }) => `${p.name} ${p.to}`).sort(), [
    "labkernel 1.1",
    "labreg 1.1",
    "labsec 1.1",
    "labslow 1.1",
  ]);
  assert.deepEqual(rebooting.installed, [{ name: "labfirmware", arch: "all", version: "1.0" }]);
  assert.deepEqual(rebooting.planned.map((p: { name: string }) => p.name).sort(), [
    "labkernel",
    "labreg",
    "labsec",
    "labslow",
  ]);
  // Four upgrades and one new dependency, each downloaded from the mirror and installed.
  assert.deepEqual(rebooting.progress, {
    download: { done: 5, total: 5 },
    install: { done: 5, total: 5 },
    current: null,
  });
  assert.equal(rebooting.reboot_required, true);
  assert.equal(rebooting.reboot.boot_id_before, "11111111-1111-4111-8111-111111111111");
  assert.equal(rebooting.reboot.kernel_before, "6.1.0-17-amd64");
  assert.ok(rebooting.reboot.command_started_at);
  assert.equal(rebooting.reboot.back_online_at, null);

  await receiver.waitFor(5, 15_000);
  await h.app.close();

  // The host comes back on a new boot with a new kernel; /run is empty again.
  h.boot.set("22222222-2222-4222-8222-222222222222", "6.1.0-18-amd64");
  rmSync(h.sandbox.rebootRequiredFile);
  const again = await h.start();
  const back = await statusOf(again.call, accepted.id);
  assert.equal(back.state, "back_online");
  assert.deepEqual(
    { ...back.reboot, command_started_at: null, back_online_at: null },
    {
      boot_id_before: "11111111-1111-4111-8111-111111111111",
      kernel_before: "6.1.0-17-amd64",
      command_started_at: null,
      boot_id_after: "22222222-2222-4222-8222-222222222222",
      kernel_after: "6.1.0-18-amd64",
      back_online_at: null,
      reboot_required_after: false,
      error: null,
    },
  );
  await receiver.waitFor(6, 15_000);
  const states = receiver.received.map((w) => w.json.data.state);
  assert.deepEqual(states, [
    "queued",
    "downloading",
    "installing",
    "reboot_scheduled",
    "rebooting",
    "back_online",
  ]);
  for (const w of receiver.received) {
    assert.equal(w.json.type, "system_update");
    assert.equal(w.json.data.id, accepted.id);
    assert.ok(verifyStandardWebhook(TEST_SECRET, w), "signed");
  }
  assert.equal(new Set(receiver.received.map((w) => w.headers["webhook-id"])).size, 6, "one event per state");

  const status = (await again.call({ method: "GET", url: "/v1/status" })).json();
  assert.equal(status.boot.boot_id, "22222222-2222-4222-8222-222222222222");
  assert.equal(status.boot.kernel, "6.1.0-18-amd64");
  assert.ok(Date.parse(status.boot.booted_at) <= Date.now());
  assert.equal(status.boot.last_reboot.planned, true);
  assert.equal(status.boot.last_reboot.apply_id, accepted.id);
  assert.equal(status.boot.last_reboot.previous_boot_id, "11111111-1111-4111-8111-111111111111");
});

test("a reboot the agent did not schedule is recorded and shown in the status; the same boot again is no reboot", async (t) => {
  const h = await setup(t);
  const first = (await h.call({ method: "GET", url: "/v1/status" })).json();
  assert.equal(first.boot.boot_id, "11111111-1111-4111-8111-111111111111");
  assert.equal(first.boot.last_reboot, null);
  await h.app.close();
  const same = await h.start();
  assert.equal((await same.call({ method: "GET", url: "/v1/status" })).json().boot.last_reboot, null);
  await same.app.close();

  h.boot.set("33333333-3333-4333-8333-333333333333", "6.1.0-17-amd64");
  const after = await h.start();
  const s = (await after.call({ method: "GET", url: "/v1/status" })).json();
  assert.equal(s.boot.boot_id, "33333333-3333-4333-8333-333333333333");
  assert.equal(s.boot.last_reboot.planned, false);
  assert.equal(s.boot.last_reboot.apply_id, null);
  assert.equal(s.boot.last_reboot.previous_boot_id, "11111111-1111-4111-8111-111111111111");
  assert.ok(Date.parse(s.boot.last_reboot.detected_at) <= Date.now());
});

test("download-updates leaves out, as an apply would, what exclude names and what is too young for the minimum age", async (t) => {
  const h = await setup(t);
  const r = await h.call({
    method: "POST",
    url: "/v1/system/download-updates",
    // Every version is first seen now: a day's minimum defers the regular updates, not the security fix.
    payload: { update_type: "full", exclude: ["labsec"], min_age_days: 1 },
  });
  assert.equal(r.statusCode, 200, r.body);
  assert.deepEqual(r.json().downloaded, []);
  assert.deepEqual(r.json().packages, []);
  const security = await h.call({
    method: "POST",
    url: "/v1/system/download-updates",
    payload: { update_type: "full", exclude: ["lab[kr]*"], min_age_days: 0 },
  });
  assert.equal(security.statusCode, 200, security.body);
  assert.deepEqual(
    security.json().downloaded.map((f: { file: string }) => f.file),
    ["labsec_1.1_all.deb", "labslow_1.1_all.deb"],
  );
});

test("download-updates fills the cache without installing; the apply after it downloads nothing", async (t) => {
  const h = await setup(t);
  const before = await h.sandbox.installed();
  const security = await h.call({
    method: "POST",
    url: "/v1/system/download-updates",
    payload: { update_type: "security" },
  });
  assert.equal(security.statusCode, 200, security.body);
  assert.deepEqual(
    security.json().downloaded.map((f: { file: string }) => f.file),
    ["labsec_1.1_all.deb"],
  );

  const r = await h.call({
    method: "POST",
    url: "/v1/system/download-updates",
    payload: { update_type: "full" },
  });
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  const files = [
    "labfirmware_1.0_all.deb",
    "labkernel_1.1_all.deb",
    "labreg_1.1_all.deb",
    "labslow_1.1_all.deb",
  ];
  assert.deepEqual(
    body.downloaded.map((f: { file: string }) => f.file),
    files,
    "labsec is in the cache already",
  );
  const size = (f: string) =>
    statSync(
      join(
        repo.dir,
        f === "labsec_1.1_all.deb"
          ? "debian-security/pool/bookworm-security"
          : "debian/pool/bookworm-updates",
        f,
      ),
    ).size;
  assert.deepEqual(
    body.downloaded.map((f: { bytes: number }) => f.bytes),
    files.map(size),
  );
  assert.equal(
    body.bytes,
    files.map(size).reduce((a, b) => a + b, 0),
  );
  assert.deepEqual(body.packages.map((p: { name: string }) => p.name).sort(), [
    "labkernel",
    "labreg",
    "labsec",
    "labslow",
  ]);
  assert.deepEqual(await h.sandbox.installed(), before, "nothing installed");

  // The mirror now refuses every package file: the apply can only install from the cache.
  h.mirror.refusePackages(true);
  const asked = h.mirror.asked.length;
  const apply = await h.call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full" },
    headers: { prefer: "respond-async" },
  });
  assert.equal(apply.statusCode, 202, apply.body);
  const done = await waitFor("the apply to end", async () => {
    const s = await statusOf(h.call, apply.json().id);
    return ["completed", "failed"].includes(s.state) ? s : undefined;
  });
  assert.equal(done.state, "completed", JSON.stringify(done.error));
  assert.deepEqual(done.progress.download, { done: 0, total: 0 }, "nothing to download");
  assert.deepEqual(done.progress.install, { done: 5, total: 5 });
  assert.deepEqual(
    h.mirror.asked.slice(asked).filter((p) => p.endsWith(".deb")),
    [],
    "no package file was asked for",
  );
  assert.equal((await h.sandbox.installed()).labslow, "1.1");
});

test("Prefer: wait=N holds the 202 until the apply ends; an unknown apply is 404; a denied callback is 400", async (t) => {
  const h = await setup(t, { HOSTKEEPER_WEBHOOK_DENY_CIDRS: "10.0.0.0/8" });
  const r = await h.call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
    headers: { prefer: "respond-async,wait=30" },
  });
  assert.equal(r.statusCode, 202, r.body);
  assert.equal(r.headers["preference-applied"], "respond-async, wait=30");
  assert.equal(r.json().state, "completed", "it ended within the wait");
  assert.deepEqual(
    r.json().upgraded.map((p: { name: string }) => p.name),
    ["labsec"],
  );

  const missing = await h.call({ method: "GET", url: "/v1/system/applies/999" });
  assert.equal(missing.statusCode, 404, missing.body);
  assert.equal(missing.json().code, "apply_not_found");
  const denied = await h.call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security", callback_url: "http://10.1.2.3/hook" },
  });
  assert.equal(denied.statusCode, 400, denied.body);
  assert.equal(denied.json().errors[0].field, "body.callback_url");
  const history = (await h.call({ method: "GET", url: "/v1/system/apply-history" })).json().applies;
  assert.equal(history.length, 1, "the refused apply was not recorded");
  assert.equal(history[0].state, "completed");
});

test("one apply at a time: an async apply queued behind another fails busy after the lock time-out", async (t) => {
  const h = await setup(t, { HOSTKEEPER_PACKAGE_LOCK_TIMEOUT_MS: "1000" });
  const release = join(h.sandbox.root, "release-labslow");
  rmSync(release);
  // Lets a postinst still waiting go on if the test fails (the sandbox may already be gone by then).
  t.after(() => existsSync(h.sandbox.root) && writeFileSync(release, ""));
  const start = (type: string) =>
    h.call({
      method: "POST",
      url: "/v1/system/apply-updates",
      payload: { update_type: type },
      headers: { prefer: "respond-async" },
    });
  const first = (await start("full")).json();
  await waitFor("the first apply to install", async () =>
    (await statusOf(h.call, first.id)).state === "installing" ? true : undefined,
  );
  // Held by labslow's postinst: the package dpkg works on is named.
  await waitFor("the first apply to name labslow", async () =>
    (await statusOf(h.call, first.id)).progress.current === "labslow" ? true : undefined,
  );
  const second = await start("security");
  assert.equal(second.statusCode, 202, second.body);
  assert.equal(second.json().state, "queued");
  const failed = await waitFor("the second apply to fail", async () => {
    const s = await statusOf(h.call, second.json().id);
    return s.state === "failed" ? s : undefined;
  });
  assert.equal(failed.error.code, "package_manager_busy");
  assert.match(failed.error.detail, /another check or apply/);
  assert.deepEqual(
    failed.history.map((e: { state: string }) => e.state),
    ["queued", "failed"],
  );
  writeFileSync(release, "");
  const done = await waitFor("the first apply to end", async () => {
    const s = await statusOf(h.call, first.id);
    return ["completed", "failed"].includes(s.state) ? s : undefined;
  });
  assert.equal(done.state, "completed", JSON.stringify(done.error));
});

/** dpkg's status of a package in the sandbox: `install ok installed` when it is fully set up. */
const dpkgStatus = (root: string, name: string) =>
  // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own field syntax
  exec("dpkg-query", [`--admindir=${root}/var/lib/dpkg`, "-W", "-f=${Status}", name]);

/** The process group of `pid` (field 5 of /proc/PID/stat). */
const processGroup = (pid: number) =>
  Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ")[2]);

test("an apply cut short by a stop of the agent is interrupted; the next apply runs dpkg --configure -a first", async (t) => {
  const h = await setup(t);
  await h.app.close();
  rmSync(join(h.sandbox.root, "release-labslow"));
  const env = { ...h.agentEnv, HOSTKEEPER_DATA_DIR: h.dataDir, HOSTKEEPER_TOKEN: TEST_TOKEN };
  const agent = await startAgent(t, env);
  const api = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
    request(agent.port, method, path, TEST_TOKEN, body, headers);
  const r = await api(
    "POST",
    "/v1/system/apply-updates",
    { update_type: "full" },
    { prefer: "respond-async" },
  );
  assert.equal(r.status, 202, r.body);
  const id = JSON.parse(r.body).id as number;
  const pidFile = join(h.sandbox.root, "labslow-postinst.pid");
  const postinst = await waitFor(
    "labslow's postinst",
    () =>
      existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== ""
        ? Number(readFileSync(pidFile, "utf8"))
        : undefined,
    30_000,
  );
  const installing = JSON.parse((await api("GET", `/v1/system/applies/${id}`)).body);
  assert.equal(installing.state, "installing");

  // The agent and its apt-get (its own process group, with dpkg and the postinst) stop at once, as on a crash.
  const group = processGroup(postinst);
  agent.child.kill("SIGKILL");
  await agent.exited;
  process.kill(-group, "SIGKILL");
  await waitFor("the postinst to be gone", () => (alive(postinst) ? undefined : true));
  writeFileSync(join(h.sandbox.root, "release-labslow"), "");
  assert.notEqual(
    await dpkgStatus(h.sandbox.root, "labslow"),
    "install ok installed",
    "dpkg was left unfinished",
  );

  const restarted = await h.start();
  const interrupted = await statusOf(restarted.call, id);
  assert.equal(interrupted.state, "interrupted");
  assert.equal(interrupted.error.code, "interrupted");
  const [rec] = (await restarted.call({ method: "GET", url: "/v1/system/apply-history" })).json().applies;
  assert.equal(rec.outcome, "interrupted");

  const next = await restarted.call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full" },
  });
  assert.equal(next.statusCode, 200, next.body);
  const recovered = await statusOf(restarted.call, next.json().id);
  assert.equal(recovered.state, "completed");
  assert.equal(recovered.recovery.action, "ran");
  assert.equal(recovered.recovery.command, "dpkg --configure -a");
  assert.equal(await dpkgStatus(h.sandbox.root, "labslow"), "install ok installed");
  assert.equal((await h.sandbox.installed()).labslow, "1.1");
});

test("the host's own package state is untouched", () => {
  assert.deepEqual(hostPackageState(), hostBefore);
});
