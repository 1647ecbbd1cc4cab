import assert from "node:assert/strict";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, type TestContext, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { buildTestApp, TEST_TOKEN } from "../helpers/app.js";
import {
  type AptRepo,
  aptAgentEnv,
  buildAptRepo,
  createAptSandbox,
  type DebSpec,
  debianArch,
} from "../helpers/apt-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";
import { holdFcntlLocks, rebootMarker } from "../helpers/processes.js";
import { waitFor } from "../helpers/wait.js";
import { scrape, value } from "../metrics/support.js";

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

const REBOOT_FLAG =
  'echo "*** System restart required ***" > "$DPKG_ROOT/run/reboot-required"\necho labkernel >> "$DPKG_ROOT/run/reboot-required.pkgs"';

/**
 * labsec: a security update. labboth: the same version in updates and security. labnewer: 1.1 in security,
 * 1.2 in updates. labhold: a security update, held in most tests. labreg: a regular update. labkernel: a
 * regular update that flags a reboot (as a kernel does) and pulls in a new package, labfirmware.
 */
const DEBS: DebSpec[] = [
  ...["labsec", "labboth", "labnewer", "labhold", "labreg", "labkernel"].map(
    (name): DebSpec => ({ name, version: "1.0", suites: ["bookworm"] }),
  ),
  { name: "labsec", version: "1.1", suites: ["bookworm-security"] },
  { name: "labboth", version: "1.1", suites: ["bookworm-updates", "bookworm-security"] },
  { name: "labnewer", version: "1.1", suites: ["bookworm-security"] },
  { name: "labnewer", version: "1.2", suites: ["bookworm-updates"] },
  { name: "labhold", version: "1.1", suites: ["bookworm-security"] },
  { name: "labreg", version: "1.1", suites: ["bookworm-updates"] },
  { name: "labfirmware", version: "1.0", suites: ["bookworm-updates"] },
  {
    name: "labkernel",
    version: "1.1",
    suites: ["bookworm-updates"],
    depends: "labfirmware",
    postinst: REBOOT_FLAG,
  },
];
const INITIAL = ["labsec", "labboth", "labnewer", "labhold", "labreg", "labkernel"].map((n) => `${n}=1.0`);

let repo: AptRepo;
before(async () => {
  repo = await buildAptRepo({ after: () => {} }, DEBS, debianArch());
});
test.after(() => rmSync(repo.dir, { recursive: true, force: true }));

async function setup(
  t: TestContext,
  env: Record<string, string> = {},
  opts: { sourcesList?: string; install?: boolean } = {},
) {
  const sandbox = await createAptSandbox(t, repo, {
    install: opts.install === false ? [] : INITIAL,
    sourcesList: opts.sourcesList,
  });
  const dir = mkdtempSync(join(tmpdir(), "hk-reboot-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const reboot = rebootMarker(dir);
  const agentEnv = {
    ...aptAgentEnv(sandbox),
    HOSTKEEPER_REBOOT_COMMAND: reboot.command,
    HOSTKEEPER_REBOOT_DELAY_MS: "300",
    HOSTKEEPER_HOLD_PACKAGES: "labhold",
    ...env,
  };
  const app = await buildTestApp(t, agentEnv);
  /** The agent again, on the same data, with `more` settings. */
  const restart = (more: Record<string, string>) =>
    buildTestApp(t, { ...agentEnv, ...more }, { dataDir: app.dataDir });
  return { sandbox, reboot, dir, restart, ...app };
}

type Call = Awaited<ReturnType<typeof setup>>["call"];
const statusOf = async (call: Call, id: number) => {
  const r = await call({ method: "GET", url: `/v1/system/applies/${id}` });
  assert.equal(r.statusCode, 200, r.body);
  return r.json();
};

/** Only an apply recorded `reboot_scheduled` starts the reboot's delay: this one ended without. */
async function assertNoRebootScheduled(call: Call, id: number): Promise<void> {
  const s = await statusOf(call, id);
  assert.equal(s.state, "completed");
  assert.equal(s.reboot_at, null);
  assert.equal(s.reboot, null);
  assert.ok(!s.history.some((e: { state: string }) => e.state === "reboot_scheduled"), "never scheduled");
}

/** Whether a child of this process (where the agent runs) has all of `args` on its command line. */
function childRunning(...args: string[]): boolean {
  let children: string[];
  try {
    children = readFileSync(`/proc/${process.pid}/task/${process.pid}/children`, "utf8").trim().split(/\s+/);
  } catch {
    return false;
  }
  return children.some((pid) => {
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
      return args.every((a) => argv.includes(a));
    } catch {
      return false;
    }
  });
}

const byName = <T extends { name: string }>(list: T[]) => Object.fromEntries(list.map((p) => [p.name, p]));

test("check-updates counts and classifies updates by origin, with the security version of each", async (t) => {
  const { call } = await setup(t);
  const r = await call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  assert.deepEqual([...body.packages].sort(), [
    "labboth",
    "labhold",
    "labkernel",
    "labnewer",
    "labreg",
    "labsec",
  ]);
  assert.equal(body.security_updates, 4);
  assert.equal(body.regular_updates, 2);
  assert.equal(body.updates_available, true);
  assert.equal(body.reboot_required, false);
  assert.equal(body.package_manager, "apt");
  assert.ok(Date.parse(body.checked_at) <= Date.now());
  const u = byName(body.updates as { name: string; [k: string]: unknown }[]);
  assert.deepEqual(u.labnewer, {
    name: "labnewer",
    arch: "all",
    current_version: "1.0",
    new_version: "1.2",
    security: true,
    security_version: "1.1",
    held: false,
    held_reason: null,
    advisories: [],
    // Seen first by this check.
    first_seen_at: body.checked_at,
  });
  assert.deepEqual(
    Object.fromEntries(Object.values(u).map((p) => [p.name, [p.security, p.security_version, p.held]])),
    {
      labsec: [true, "1.1", false],
      labboth: [true, "1.1", false],
      labnewer: [true, "1.1", false],
      labhold: [true, "1.1", true],
      labreg: [false, null, false],
      labkernel: [false, null, false],
    },
  );
});

test("the status says when the last check succeeded and what it found, and apt's version", async (t) => {
  const { call } = await setup(t);
  const before = (await call({ method: "GET", url: "/v1/status" })).json();
  assert.equal(before.updates.last_check_at, null);
  const check = (await call({ method: "POST", url: "/v1/system/check-updates" })).json();
  const s = (await call({ method: "GET", url: "/v1/status" })).json();
  assert.deepEqual(s.updates, {
    last_check_at: check.checked_at,
    security_updates: 4,
    regular_updates: 2,
    reboot_required: false,
  });
  assert.equal(s.versions.package_manager.name, "apt");
  assert.match(s.versions.package_manager.version, /^\d+\.\d+/);
});

test("a security apply installs exactly the security set, the security version where a newer regular one exists, and keeps held packages", async (t) => {
  const { call, sandbox, reboot } = await setup(t);
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security", auto_reboot: true },
    headers: { "user-agent": "hk-test/1", "x-request-id": "req-security-1" },
  });
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  assert.deepEqual(
    byName(body.upgraded),
    byName([
      { name: "labboth", arch: "all", from: "1.0", to: "1.1" },
      { name: "labnewer", arch: "all", from: "1.0", to: "1.1" },
      { name: "labsec", arch: "all", from: "1.0", to: "1.1" },
    ]),
  );
  assert.deepEqual(body.installed, []);
  assert.deepEqual(body.removed, []);
  assert.deepEqual(body.held_back, [
    { name: "labhold", arch: "all", current_version: "1.0", available_version: "1.1", reason: "hold" },
  ]);
  // No security update flags a reboot, so auto_reboot schedules nothing.
  assert.equal(body.reboot_required, false);
  assert.equal(body.reboot_scheduled, false);
  assert.equal(body.reboot_at, null);
  assert.deepEqual(await sandbox.installed(), {
    labboth: "1.1",
    labhold: "1.0",
    labkernel: "1.0",
    labnewer: "1.1",
    labreg: "1.0",
    labsec: "1.1",
  });

  const h = await call({ method: "GET", url: "/v1/system/apply-history" });
  assert.equal(h.statusCode, 200, h.body);
  const [rec] = h.json().applies;
  assert.equal(h.json().applies.length, 1);
  assert.equal(rec.id, body.id);
  assert.equal(rec.request_id, "req-security-1");
  assert.deepEqual(rec.requested_by, { remote_address: "127.0.0.1", user_agent: "hk-test/1" });
  assert.equal(rec.update_type, "security");
  assert.equal(rec.auto_reboot, true);
  assert.equal(rec.outcome, "succeeded");
  assert.equal(rec.error, null);
  assert.deepEqual(rec.upgraded, body.upgraded);
  assert.deepEqual(rec.held_back, body.held_back);
  assert.equal(rec.duration_ms, body.duration_ms);
  assert.ok(rec.duration_ms >= 0);

  await assertNoRebootScheduled(call, body.id);
  assert.equal(reboot.ranAt(), undefined, "no reboot when none is required");
});

test("check and apply runs are timed and counted by package manager and outcome", async (t) => {
  const h = await setup(t);
  assert.equal((await h.call({ method: "POST", url: "/v1/system/check-updates" })).statusCode, 200);
  const r = await h.call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  });
  assert.equal(r.statusCode, 200, r.body);
  const s = await scrape(h);
  const runs = (operation: string, outcome: string) =>
    value(s, "hostkeeper_package_operation_duration_seconds_count", {
      operation,
      package_manager: "apt",
      outcome,
    });
  assert.equal(runs("check", "succeeded"), 1);
  assert.equal(runs("apply", "succeeded"), 1);
  assert.equal(value(s, "hostkeeper_package_operation_duration_seconds_count", { outcome: "failed" }), 0);
  assert.ok(value(s, "hostkeeper_package_operation_duration_seconds_sum", { operation: "apply" }) > 0);
});

test("a full apply upgrades everything but held packages, with new dependencies, and reports the reboot", async (t) => {
  const { call, sandbox, reboot } = await setup(t);
  const r = await call({ method: "POST", url: "/v1/system/apply-updates", payload: { update_type: "full" } });
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  assert.deepEqual(body.upgraded.map((p: { name: string; to: string }) => `${p.name} ${p.to}`).sort(), [
    "labboth 1.1",
    "labkernel 1.1",
    "labnewer 1.2",
    "labreg 1.1",
    "labsec 1.1",
  ]);
  assert.deepEqual(body.installed, [{ name: "labfirmware", arch: "all", version: "1.0" }]);
  assert.deepEqual(
    body.held_back.map((p: { name: string }) => p.name),
    ["labhold"],
  );
  assert.equal(body.reboot_required, true, "labkernel's postinst set the reboot flag");
  assert.equal(body.reboot_scheduled, false, "auto_reboot defaults to false");
  assert.equal((await sandbox.installed()).labhold, "1.0");

  const again = (await call({ method: "POST", url: "/v1/system/check-updates" })).json();
  assert.deepEqual(again.packages, ["labhold"]);
  assert.equal(again.reboot_required, true);
  await assertNoRebootScheduled(call, body.id);
  assert.equal(reboot.ranAt(), undefined);
});

test("auto_reboot runs the reboot command after the response, and only when a reboot is required", async (t) => {
  const { app, sandbox, reboot } = await setup(t, { HOSTKEEPER_HOLD_PACKAGES: "" });
  await app.listen({ host: "127.0.0.1", port: 0 });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/v1/system/apply-updates`;
  const res = await fetch(url, {
    method: "POST",
    headers: { authorization: `Bearer ${TEST_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ update_type: "full", auto_reboot: true }),
  });
  const body = (await res.json()) as {
    reboot_required: boolean;
    reboot_scheduled: boolean;
    reboot_at: string;
    finished_at: string;
  };
  // Checked at once: the reboot is due 300 ms after the answer, and the checks below may take longer.
  assert.equal(reboot.ranAt(), undefined, "the reboot command must not run before the response");
  assert.equal(res.status, 200, JSON.stringify(body));
  assert.equal(body.reboot_required, true);
  assert.equal(body.reboot_scheduled, true);
  assert.ok(Date.parse(body.reboot_at) > Date.parse(body.finished_at));
  assert.equal((await sandbox.installed()).labhold, "1.1", "nothing held in this test");
  const deadline = Date.now() + 5_000;
  while (reboot.ranAt() === undefined && Date.now() < deadline) await sleep(50);
  const ranAt = reboot.ranAt();
  assert.ok(ranAt !== undefined, "the reboot command ran");
  // Not before the time the answer announced (a timer may fire up to a millisecond early).
  assert.ok(ranAt >= Date.parse(body.reboot_at) - 1, `ran at ${ranAt}, announced ${body.reboot_at}`);
});

test("a reboot scheduled but not yet due is cancelled when the agent closes", async (t) => {
  // Not due before the test ends: what the stop recorded says the reboot command will not run.
  const { app, call, reboot, dir, restart } = await setup(t, { HOSTKEEPER_REBOOT_DELAY_MS: "600000" });
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", auto_reboot: true },
  });
  assert.equal(r.json().reboot_scheduled, true, r.body);
  await app.close();
  // Read back as the stop left it: without a boot id, the agent's start changes no apply.
  const again = await restart({ HOSTKEEPER_BOOT_ID_FILE: join(dir, "no-boot-id") });
  const s = await statusOf(again.call, r.json().id);
  assert.equal(s.state, "completed");
  assert.equal(s.reboot.command_started_at, null);
  assert.equal(s.reboot.error, "the agent stopped before the reboot was due; the reboot command did not run");
  assert.deepEqual(s.history.map((e: { state: string }) => e.state).slice(-2), [
    "reboot_scheduled",
    "completed",
  ]);
  assert.equal(reboot.ranAt(), undefined);
});

test("a lock held by another program: check and apply wait for it, then fail as busy naming the holder", async (t) => {
  const { call, sandbox } = await setup(t, { HOSTKEEPER_PACKAGE_LOCK_TIMEOUT_MS: "1000" });
  const lib = join(sandbox.root, "var/lib");
  const holder = await holdFcntlLocks(t, [
    join(lib, "dpkg/lock-frontend"),
    join(lib, "dpkg/lock"),
    join(lib, "apt/lists/lock"),
  ]);
  for (const [url, payload] of [
    ["/v1/system/check-updates", undefined],
    ["/v1/system/apply-updates", { update_type: "security" }],
  ] as const) {
    const started = Date.now();
    const r = await call({ method: "POST", url, payload });
    assert.equal(r.statusCode, 500, r.body);
    assert.ok(Date.now() - started >= 1000, "waited for the time-out first");
    const p = r.json();
    assert.equal(p.code, "package_manager_busy");
    assert.match(p.detail, new RegExp(`held by process ${holder.pid} \\(python`));
    assert.equal(p.lock_holder.pid, holder.pid);
  }
  const [rec] = (await call({ method: "GET", url: "/v1/system/apply-history" })).json().applies;
  assert.equal(rec.outcome, "failed");
  assert.equal(rec.error.code, "package_manager_busy");
  assert.equal((await sandbox.installed()).labsec, "1.0");
});

test("check and apply are serialized: a check waits for the running apply, which waits for the lock", async (t) => {
  const { call, sandbox } = await setup(t, { HOSTKEEPER_PACKAGE_LOCK_TIMEOUT_MS: "5000" });
  const lib = join(sandbox.root, "var/lib");
  const holder = await holdFcntlLocks(t, [join(lib, "dpkg/lock-frontend"), join(lib, "dpkg/lock")]);
  const done: string[] = [];
  const finished = (name: string) => (r: Awaited<ReturnType<typeof call>>) => {
    done.push(name);
    return r;
  };
  const apply = call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "security" },
  }).then(finished("apply"));
  // The apply records itself as running in the same step as it takes the agent's lock: the check comes after.
  const applyUnderWay = async () =>
    (await call({ method: "GET", url: "/v1/system/apply-history" }))
      .json()
      .applies.some((a: { outcome: string }) => a.outcome === "running");
  const end = Date.now() + 10_000;
  while (!(await applyUnderWay())) {
    assert.ok(Date.now() < end, "no apply under way within 10 s");
    await sleep(20);
  }
  // apt-get's upgrade started while the dpkg lock is held: it is refused, and tried again until the lock is free.
  await waitFor("apt-get to try the upgrade", () =>
    childRunning("apt-get", "-y", "upgrade") ? true : undefined,
  );
  const check = call({ method: "POST", url: "/v1/system/check-updates" }).then(finished("check"));
  assert.deepEqual(done, [], "the apply waits for the dpkg lock, the check for the apply");
  await holder.release();
  const [a, c] = await Promise.all([apply, check]);
  assert.equal(a.statusCode, 200, a.body);
  assert.equal(c.statusCode, 200, c.body);
  assert.deepEqual(done, ["apply", "check"]);
  assert.equal(
    c.json().security_updates,
    1,
    "the check saw the state after the apply: only the held labhold",
  );
});

test("a broken repository makes check a 500 problem carrying apt's own error lines", async (t) => {
  const broken = mkdtempSync(join(tmpdir(), "hk-aptrepo-broken-"));
  t.after(() => rmSync(broken, { recursive: true, force: true }));
  cpSync(repo.dir, broken, { recursive: true });
  // One index no longer matches the hash its Release file gives.
  for (const arch of ["all", repo.arch])
    writeFileSync(
      join(broken, `debian-security/dists/bookworm-security/main/binary-${arch}/Packages`),
      "Package: corrupted\n",
    );
  const h = await setup(
    t,
    {},
    { sourcesList: repo.sourcesList.replaceAll(repo.dir, broken), install: false },
  );
  const { call } = h;
  const r = await call({ method: "POST", url: "/v1/system/check-updates" });
  assert.equal(r.statusCode, 500, r.body);
  const p = r.json();
  assert.equal(p.code, "package_manager_failed");
  const counted = value(await scrape(h), "hostkeeper_package_operation_duration_seconds_count", {
    operation: "check",
    package_manager: "apt",
    outcome: "failed",
  });
  assert.equal(counted, 1, "the failed check is counted");
  assert.match(p.detail, /^apt-get update failed \(exit 100\): /);
  assert.match(p.detail, /E: /);
  assert.doesNotMatch(
    p.detail,
    /Get:\d|Reading package lists/,
    "apt's error lines only, not its whole output",
  );
  assert.ok(p.manager_errors.length > 0);
  assert.equal(p.command, "apt-get update");
});

test("the host's own package state is untouched", () => {
  assert.deepEqual(hostPackageState(), hostBefore);
});
