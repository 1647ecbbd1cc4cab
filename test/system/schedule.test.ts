import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
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
import { holdFcntlLocks, rebootMarker } from "../helpers/processes.js";
import { alive, request, startAgent } from "../helpers/serve.js";
import { waitFor } from "../helpers/wait.js";

/*
 * Maintenance windows end to end: a real agent (in the test's process with a clock it controls, or a child
 * process it kills) applying from a sandboxed apt on its own.
 */

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

const MINUTE = 60_000;
const DAY = 86_400_000;

/** labsec: a security update; labkernel: a regular one that flags a reboot; labslow: one whose postinst waits. */
const DEBS: DebSpec[] = [
  ...["labsec", "labkernel", "labslow"].map(
    (name): DebSpec => ({ name, version: "1.0", suites: ["bookworm"] }),
  ),
  { name: "labsec", version: "1.1", suites: ["bookworm-security"] },
  { name: "labkernel", version: "1.1", suites: ["bookworm-updates"], postinst: REBOOT_FLAG_POSTINST },
  { name: "labslow", version: "1.1", suites: ["bookworm-updates"], postinst: waitingPostinst("labslow") },
];

let repo: AptRepo;
before(async () => {
  repo = await buildAptRepo({ after: () => {} }, DEBS, debianArch());
});
test.after(() => rmSync(repo.dir, { recursive: true, force: true }));

const iso = (ms: number) => new Date(ms).toISOString();
const WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
/** A UTC window opening at `opens` (a whole minute) on that weekday only. */
const windowAt = (opens: number, minutes: number) => ({
  days: [WEEKDAYS[new Date(opens).getUTCDay()]],
  start: iso(opens).slice(11, 16),
  duration_minutes: minutes,
});
const thisMinute = () => Math.floor(Date.now() / MINUTE) * MINUTE;

/**
 * A sandbox served over loopback HTTP (apt downloads into its cache) and an agent on it. `clock` is the
 * agent's, read at each call: a test moves it to put a window's opening a moment away.
 */
async function setup(t: TestContext, env: Record<string, string> = {}, clock?: () => number) {
  const mirror = await serveDirectory(t, repo.dir);
  const sandbox = await createAptSandbox(t, repo, {
    install: ["labsec=1.0", "labkernel=1.0", "labslow=1.0"],
    sourcesList: repo.sourcesList.replaceAll(`file:${repo.dir}`, mirror.url),
  });
  writeFileSync(join(sandbox.root, "release-labslow"), "");
  const dir = mkdtempSync(join(tmpdir(), "hk-schedule-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "boot_id"), "11111111-1111-4111-8111-111111111111\n");
  writeFileSync(join(dir, "osrelease"), "6.1.0-17-amd64\n");
  const reboot = rebootMarker(dir);
  const agentEnv = {
    ...aptAgentEnv(sandbox),
    HOSTKEEPER_REBOOT_COMMAND: reboot.command,
    HOSTKEEPER_REBOOT_DELAY_MS: "100",
    HOSTKEEPER_BOOT_ID_FILE: join(dir, "boot_id"),
    HOSTKEEPER_KERNEL_RELEASE_FILE: join(dir, "osrelease"),
    HOSTKEEPER_WEBHOOK_RETRY_SCHEDULE: "1,1,1",
    ...env,
  };
  const dataDir = mkdtempSync(join(tmpdir(), "hk-data-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const start = (now = clock) => buildTestApp(t, agentEnv, { dataDir, ...(now ? { now } : {}) });
  return { sandbox, mirror, reboot, agentEnv, dataDir, start };
}

type Call = Awaited<ReturnType<Awaited<ReturnType<typeof setup>>["start"]>>["call"];
const api = async (call: Call, method: string, url: string, payload?: unknown) => {
  const r = await call({ method, url, ...(payload === undefined ? {} : { payload }) });
  assert.ok(r.statusCode < 300, `${method} ${url}: ${r.statusCode} ${r.body}`);
  return r.json();
};
/** A security schedule with a half-hour window that opened at the start of this minute. */
const scheduleOpenNow = (call: Call, reboot: "never" | "always" = "never") =>
  api(call, "PUT", "/v1/system/schedule", {
    windows: [windowAt(thisMinute(), 30)],
    timezone: "UTC",
    update_type: "security",
    reboot,
  });
/** The schedule once its newest run is no longer `running`. */
const runEnded = (call: Call, ms = 30_000) =>
  waitFor(
    "the slot's run to end",
    async () => {
      const s = await api(call, "GET", "/v1/system/schedule");
      return s.runs[0] && s.runs[0].state !== "running" ? s : undefined;
    },
    ms,
  );

test("a window opening a moment from now on the agent's clock: one scheduled apply, downloaded ahead, signed callbacks, the reboot inside the window", async (t) => {
  const opens = thisMinute() + 2 * MINUTE;
  let offset = 0;
  const h = await setup(t, {}, () => Date.now() + offset);
  const { call } = await h.start();
  const receiver = await startReceiver(t);
  // The agent's clock now reads two seconds before the window opens.
  offset = opens - 2000 - Date.now();
  const set = await api(call, "PUT", "/v1/system/schedule", {
    windows: [windowAt(opens, 10)],
    timezone: "UTC",
    update_type: "full",
    reboot: "if_required",
    download_ahead_minutes: 1,
    callback_url: receiver.url,
  });
  assert.equal(set.next_run_at, iso(opens));
  assert.deepEqual(set.runs, []);
  assert.deepEqual(set.windows, [windowAt(opens, 10)]);
  assert.equal(set.random_delay_minutes, 0);

  const s = await runEnded(call);
  const [run] = s.runs;
  assert.deepEqual(run, { slot_start: iso(opens), state: "completed", apply_id: run.apply_id });
  assert.equal(s.next_run_at, iso(opens + 7 * DAY), "this slot is done; the next is a week on");
  const status = await api(call, "GET", `/v1/system/applies/${run.apply_id}`);
  assert.equal(status.trigger, "schedule");
  assert.ok(Date.parse(status.started_at) + offset >= opens, "not before the window opened");
  assert.deepEqual(status.progress.download, { done: 0, total: 0 }, "all downloaded ahead of the window");
  assert.ok(h.mirror.asked.some((p) => p.endsWith("labkernel_1.1_all.deb")));
  assert.deepEqual(status.upgraded.map((p: { name: string }) => p.name).sort(), [
    "labkernel",
    "labsec",
    "labslow",
  ]);
  assert.equal(status.reboot_required, true);
  assert.equal(status.reboot_scheduled, true);
  await waitFor("the reboot command", () => h.reboot.ranAt());

  await receiver.waitFor(5, 15_000);
  assert.deepEqual(
    receiver.received.map((w) => w.json.data.state),
    ["queued", "downloading", "installing", "reboot_scheduled", "rebooting"],
  );
  for (const w of receiver.received) {
    assert.equal(w.json.type, "system_update");
    assert.equal(w.json.data.id, run.apply_id);
    assert.equal(w.json.data.trigger, "schedule");
    assert.ok(verifyStandardWebhook(TEST_SECRET, w), "signed");
  }
  const { applies } = await api(call, "GET", "/v1/system/apply-history");
  assert.equal(applies.length, 1, "applied once");
  assert.equal(applies[0].trigger, "schedule");
  assert.equal(applies[0].request_id, `schedule:${iso(opens)}`);
  assert.deepEqual(applies[0].requested_by, { remote_address: "local", user_agent: null });
});

/** The process group of `pid` (field 5 of /proc/PID/stat). */
const processGroup = (pid: number) =>
  Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ")[2]);

test("an agent killed during a scheduled run and started again inside the window reports it interrupted and does not run it again", async (t) => {
  const h = await setup(t);
  rmSync(join(h.sandbox.root, "release-labslow"));
  // Lets a postinst still waiting go on if the test fails (the sandbox may already be gone by then).
  t.after(() => existsSync(h.sandbox.root) && writeFileSync(join(h.sandbox.root, "release-labslow"), ""));
  const agent = await startAgent(t, {
    ...h.agentEnv,
    HOSTKEEPER_DATA_DIR: h.dataDir,
    HOSTKEEPER_TOKEN: TEST_TOKEN,
  });
  // A window open since the start of this minute, for half an hour: its slot runs at once.
  const opens = thisMinute();
  const put = await request(agent.port, "PUT", "/v1/system/schedule", TEST_TOKEN, {
    windows: [windowAt(opens, 30)],
    timezone: "UTC",
    update_type: "full",
    reboot: "never",
  });
  assert.equal(put.status, 200, put.body);
  const pidFile = join(h.sandbox.root, "labslow-postinst.pid");
  const postinst = await waitFor(
    "labslow's postinst",
    () =>
      existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== ""
        ? Number(readFileSync(pidFile, "utf8"))
        : undefined,
    30_000,
  );
  const running = JSON.parse((await request(agent.port, "GET", "/v1/system/schedule", TEST_TOKEN)).body);
  assert.equal(running.runs[0].state, "running");
  const applyId = running.runs[0].apply_id;

  // The agent and its apt-get (its own process group, with dpkg and the postinst) stop at once, as on a crash.
  const group = processGroup(postinst);
  agent.child.kill("SIGKILL");
  await agent.exited;
  process.kill(-group, "SIGKILL");
  await waitFor("the postinst to be gone", () => (alive(postinst) ? undefined : true));
  writeFileSync(join(h.sandbox.root, "release-labslow"), "");

  // Started again well inside the window: the slot is recorded, so nothing runs (the first look at the
  // schedule is over by the time the agent is ready).
  const { call } = await h.start();
  const s = await api(call, "GET", "/v1/system/schedule");
  assert.deepEqual(s.runs, [
    {
      slot_start: iso(opens),
      state: "interrupted",
      apply_id: applyId,
      reason: "the agent stopped during the run; a slot never runs twice",
    },
  ]);
  assert.equal(s.next_run_at, iso(opens + 7 * DAY));
  const { applies } = await api(call, "GET", "/v1/system/apply-history");
  assert.deepEqual(
    applies.map((a: { id: number; state: string; trigger: string }) => [a.id, a.state, a.trigger]),
    [[applyId, "interrupted", "schedule"]],
  );
});

test("started inside a window whose start passed while it was down, the agent runs the slot; after the window, records it missed", async (t) => {
  let offset = 0;
  const h = await setup(t, {}, () => Date.now() + offset);
  const first = await h.start();
  // Every day, opening in two hours: yesterday's slot closed before the schedule was set and is no one's.
  const opens = thisMinute() + 2 * 60 * MINUTE;
  const set = await api(first.call, "PUT", "/v1/system/schedule", {
    windows: [{ ...windowAt(opens, 30), days: WEEKDAYS }],
    timezone: "UTC",
    update_type: "security",
    reboot: "never",
  });
  assert.equal(set.next_run_at, iso(opens));
  await first.app.close();

  // Back ten minutes into the window.
  offset = opens + 10 * MINUTE - Date.now();
  const inside = await h.start();
  const ran = await runEnded(inside.call);
  assert.equal(ran.runs.length, 1);
  assert.equal(ran.runs[0].state, "completed", JSON.stringify(ran.runs[0]));
  assert.equal(ran.runs[0].slot_start, iso(opens));
  assert.equal((await h.sandbox.installed()).labsec, "1.1");
  await inside.app.close();

  // Back the next day, after that day's window closed.
  offset = opens + DAY + 45 * MINUTE - Date.now();
  const after = await h.start();
  const s = await api(after.call, "GET", "/v1/system/schedule");
  assert.deepEqual(
    s.runs.map((r: { slot_start: string; state: string }) => [r.slot_start, r.state]),
    [
      [iso(opens + DAY), "missed"],
      [iso(opens), "completed"],
    ],
  );
  assert.equal(s.runs[0].reason, "the agent was not running while the window was open");
  assert.equal(s.runs[0].apply_id, undefined);
  assert.equal(s.next_run_at, iso(opens + 2 * DAY));
  assert.equal((await api(after.call, "GET", "/v1/system/apply-history")).applies.length, 1);
});

test("a scheduled apply that cannot have the package manager is refused, with the reason", async (t) => {
  const h = await setup(t, { HOSTKEEPER_PACKAGE_LOCK_TIMEOUT_MS: "1000" });
  const lib = join(h.sandbox.root, "var/lib");
  const holder = await holdFcntlLocks(t, [
    join(lib, "dpkg/lock-frontend"),
    join(lib, "dpkg/lock"),
    join(lib, "apt/lists/lock"),
  ]);
  const { call } = await h.start();
  await scheduleOpenNow(call);
  const [run] = (await runEnded(call)).runs;
  assert.equal(run.state, "refused");
  assert.match(run.reason, new RegExp(`held by process ${holder.pid}`));
  const status = await api(call, "GET", `/v1/system/applies/${run.apply_id}`);
  assert.equal(status.error.code, "package_manager_busy");
  assert.equal((await h.sandbox.installed()).labsec, "1.0");
});

test("a scheduled run whose pre-apply hook fails is refused, naming the hook and its output", async (t) => {
  const hooks = mkdtempSync(join(tmpdir(), "hk-hooks-"));
  t.after(() => rmSync(hooks, { recursive: true, force: true }));
  chmodSync(hooks, 0o755);
  mkdirSync(join(hooks, "pre-apply"), { mode: 0o755 });
  writeFileSync(join(hooks, "pre-apply", "10-drain"), "#!/bin/sh\necho 'lb1 is down'\nexit 4\n", {
    mode: 0o755,
  });
  const h = await setup(t, { HOSTKEEPER_HOOKS_DIR: hooks });
  const { call } = await h.start();
  await scheduleOpenNow(call);
  const [run] = (await runEnded(call)).runs;
  assert.equal(run.state, "refused");
  assert.equal(run.reason, "pre-apply hook 10-drain exited with status 4; its output ends: lb1 is down");
  const status = await api(call, "GET", `/v1/system/applies/${run.apply_id}`);
  assert.equal(status.error.code, "hook_failed");
  assert.equal((await h.sandbox.installed()).labsec, "1.0");
});

test("a scheduled run the disk guard refuses is recorded refused with the free space it lacked, and no apply", async (t) => {
  const h = await setup(t, { HOSTKEEPER_MIN_FREE_MB: "1000000000" });
  const { call } = await h.start();
  await scheduleOpenNow(call);
  const [run] = (await runEnded(call)).runs;
  assert.equal(run.state, "refused");
  assert.match(run.reason, /not enough free space to apply the updates: .* MB free of \d+ MB needed/);
  assert.equal(run.apply_id ?? null, null);
  assert.deepEqual((await api(call, "GET", "/v1/system/apply-history")).applies, []);
  assert.equal((await h.sandbox.installed()).labsec, "1.0");
});

test("a reboot the policy asks for is left out when it would come after the window's end; an apply through the API beside it says trigger api", async (t) => {
  // The reboot would run an hour after the apply, past the end of a window of half an hour.
  const h = await setup(t, { HOSTKEEPER_REBOOT_DELAY_MS: "3600000" });
  const { call } = await h.start();
  await scheduleOpenNow(call, "always");
  const [run] = (await runEnded(call)).runs;
  assert.equal(run.state, "completed");
  assert.equal(run.reason, "no reboot: it would have come after the end of the window");
  const status = await api(call, "GET", `/v1/system/applies/${run.apply_id}`);
  assert.equal(status.state, "completed");
  assert.equal(status.reboot_scheduled, false);
  assert.equal(h.reboot.ranAt(), undefined);
  assert.equal((await h.sandbox.installed()).labsec, "1.1");

  // An apply asked for through the API beside it says so.
  const byApi = await api(call, "POST", "/v1/system/apply-updates", { update_type: "security" });
  const { applies } = await api(call, "GET", "/v1/system/apply-history");
  assert.deepEqual(
    applies.map((a: { id: number; trigger: string }) => [a.id, a.trigger]),
    [
      [byApi.id, "api"],
      [run.apply_id, "schedule"],
    ],
  );
  assert.equal((await api(call, "GET", `/v1/system/applies/${byApi.id}`)).trigger, "api");
});

test("a schedule that never reboots leaves out the reboot an apply leaves required", async (t) => {
  const h = await setup(t);
  const { call } = await h.start();
  const opens = thisMinute();
  await api(call, "PUT", "/v1/system/schedule", {
    windows: [windowAt(opens, 30)],
    timezone: "UTC",
    update_type: "full",
    reboot: "never",
  });
  const [run] = (await runEnded(call)).runs;
  assert.deepEqual(run, { slot_start: iso(opens), state: "completed", apply_id: run.apply_id });
  const status = await api(call, "GET", `/v1/system/applies/${run.apply_id}`);
  assert.equal(status.auto_reboot, false);
  assert.equal(status.reboot_required, true, "labkernel flags a reboot");
  assert.equal(status.reboot_scheduled, false);
  assert.equal(status.state, "completed");
  assert.equal(h.reboot.ranAt(), undefined);
});

test("the host's own package state is untouched", () => {
  assert.deepEqual(hostPackageState(), hostBefore);
});
