import assert from "node:assert/strict";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, type TestContext, test } from "node:test";
import { stageHooks } from "../../src/system/hooks/hook-files.js";
import { runCli } from "../cli/support.js";
import { buildTestApp } from "../helpers/app.js";
import {
  type AptRepo,
  aptAgentEnv,
  buildAptRepo,
  createAptSandbox,
  type DebSpec,
  debianArch,
  REBOOT_FLAG_POSTINST,
} from "../helpers/apt-sandbox.js";
import { buildRpmRepo, createDnfRoot, dnfAgentEnv, type RpmSpec } from "../helpers/dnf-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";
import { startReceiver } from "../helpers/http.js";
import { capturedLogger } from "../helpers/logs.js";
import { rebootMarker } from "../helpers/processes.js";
import { waitFor } from "../helpers/wait.js";

// Taken first: the host's package state, compared at the end.
const hostBefore = hostPackageState();

/** hka: a regular update; hkk: one that flags a reboot, as a kernel does. */
const DEBS: DebSpec[] = [
  { name: "hka", version: "1.0", suites: ["bookworm"] },
  { name: "hka", version: "1.1", suites: ["bookworm-updates"] },
  { name: "hkk", version: "1.0", suites: ["bookworm"] },
  { name: "hkk", version: "1.1", suites: ["bookworm-updates"], postinst: REBOOT_FLAG_POSTINST },
];

let repo: AptRepo;
before(async () => {
  repo = await buildAptRepo({ after: () => {} }, DEBS, debianArch());
});
test.after(() => rmSync(repo.dir, { recursive: true, force: true }));

type Hook = { stage: string; name: string; outcome: string; exit_code: number | null; output: string };
type Problem = { code: string; detail: string; apply_id: number; hook: Hook };

/** A hooks folder as root keeps one (root's, 0755), and a way to put a hook into a stage's folder. */
function hooksDir(t: TestContext) {
  const dir = mkdtempSync(join(tmpdir(), "hk-hooks-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  chmodSync(dir, 0o755);
  const add = (stage: string, name: string, script: string, mode = 0o755) => {
    mkdirSync(join(dir, stage), { recursive: true, mode: 0o755 });
    const file = join(dir, stage, name);
    writeFileSync(file, `#!/bin/sh\n${script}\n`);
    chmodSync(file, mode);
    return file;
  };
  return { dir, add, marker: (name: string) => join(dir, `${name}.ran`) };
}

async function aptSetup(t: TestContext, env: Record<string, string> = {}) {
  const sandbox = await createAptSandbox(t, repo, { install: ["hka=1.0", "hkk=1.0"] });
  const hooks = hooksDir(t);
  const agentEnv = { ...aptAgentEnv(sandbox), HOSTKEEPER_HOOKS_DIR: hooks.dir, ...env };
  const app = await buildTestApp(t, agentEnv);
  const apply = (payload: Record<string, unknown> = { update_type: "full" }) =>
    app.call({ method: "POST", url: "/v1/system/apply-updates", payload });
  const applyStatus = async (id: number) =>
    (await app.call({ method: "GET", url: `/v1/system/applies/${id}` })).json() as {
      state: string;
      error: { code: string; detail: string } | null;
      hooks: Hook[];
    };
  return { sandbox, hooks, agentEnv, ...app, apply, applyStatus };
}

test("hook files: name order, editors' and package managers' leftovers ignored, not executable left out, unsafe ones refused", (t) => {
  const h = hooksDir(t);
  h.add("pre-apply", "20-b", "true");
  h.add("pre-apply", "10-a", "true");
  h.add("pre-apply", "Z", "true");
  for (const n of [".hidden", "10-a~", "10-a.dpkg-old", "10-a.rpmnew"]) h.add("pre-apply", n, "true");
  h.add("pre-apply", "30-plain", "true", 0o644);
  chownSync(h.add("pre-apply", "40-other", "true"), 65534, 65534);
  h.add("pre-apply", "50-group", "true", 0o775);
  // A link to a root-only file runs it; a link into a folder others can write is refused.
  const safe = h.add("lib", "drain", "true");
  symlinkSync(safe, join(h.dir, "pre-apply", "60-link"));
  const open = mkdtempSync(join(tmpdir(), "hk-open-"));
  t.after(() => rmSync(open, { recursive: true, force: true }));
  chmodSync(open, 0o777);
  writeFileSync(join(open, "x"), "#!/bin/sh\ntrue\n", { mode: 0o755 });
  symlinkSync(join(open, "x"), join(h.dir, "pre-apply", "70-open"));

  const found = stageHooks(h.dir, "pre-apply");
  assert.deepEqual(
    found.run.map((r) => r.name),
    ["10-a", "20-b", "60-link", "Z"],
  );
  assert.equal(found.run[2]?.path, safe);
  assert.deepEqual(
    found.skipped.map((s) => s.name),
    ["30-plain"],
  );
  const refused = Object.fromEntries(found.refused.map((r) => [r.name, r.reason]));
  assert.deepEqual(Object.keys(refused), ["40-other", "50-group", "70-open"]);
  assert.match(refused["40-other"] ?? "", /it belongs to uid 65534, not root/);
  assert.match(refused["50-group"] ?? "", /it is writable by its group/);
  assert.match(
    refused["70-open"] ?? "",
    new RegExp(`the folder ${open} on its path is writable by all users`),
  );
  assert.deepEqual(stageHooks(h.dir, "post-reboot"), {
    stage: "post-reboot",
    run: [],
    refused: [],
    skipped: [],
  });
  // A stage's folder others can write refuses every hook in it.
  chmodSync(join(h.dir, "pre-apply"), 0o757);
  const all = stageHooks(h.dir, "pre-apply");
  assert.deepEqual(all.run, []);
  assert.match(all.refused[0]?.reason ?? "", /pre-apply is not safe: it is writable by all users/);
});

test("apt: a pre-apply hook that fails refuses the apply, naming it, and nothing changes; the hooks after it and post-apply do not run", async (t) => {
  const s = await aptSetup(t);
  s.hooks.add("pre-apply", "10-backup", `touch ${s.hooks.marker("backup")}`);
  s.hooks.add("pre-apply", "20-drain", "echo 'draining lb1'\necho 'lb1 refused the drain' >&2\nexit 3");
  s.hooks.add("pre-apply", "30-never", `touch ${s.hooks.marker("never")}`);
  s.hooks.add("post-apply", "10-undrain", `touch ${s.hooks.marker("post")}`);
  const r = await s.apply();
  assert.equal(r.statusCode, 409, r.body);
  const problem = r.json() as Problem;
  assert.equal(problem.code, "hook_failed");
  assert.match(
    problem.detail,
    /^pre-apply hook 20-drain exited with status 3; its output ends: draining lb1\nlb1 refused the drain$/,
  );
  assert.equal(problem.hook.name, "20-drain");
  assert.equal(problem.hook.exit_code, 3);
  assert.deepEqual(await s.sandbox.installed(), { hka: "1.0", hkk: "1.0" });
  assert.ok(existsSync(s.hooks.marker("backup")));
  assert.ok(!existsSync(s.hooks.marker("never")), "no hook after the failed one runs");
  assert.ok(!existsSync(s.hooks.marker("post")), "no post-apply hook runs after a refusal");
  const status = await s.applyStatus(problem.apply_id);
  assert.equal(status.state, "failed");
  assert.equal(status.error?.code, "hook_failed");
  assert.deepEqual(
    status.hooks.map((h) => [h.stage, h.name, h.outcome]),
    [
      ["pre-apply", "10-backup", "succeeded"],
      ["pre-apply", "20-drain", "failed"],
    ],
  );
});

test("apt: a pre-apply hook past its time-out is stopped with what it started, and refuses the apply", async (t) => {
  // 3 s: time for the shell to write its child's PID and a line even on a loaded machine.
  const s = await aptSetup(t, { HOSTKEEPER_HOOK_TIMEOUT_S: "3" });
  const pidFile = s.hooks.marker("child");
  s.hooks.add("pre-apply", "10-slow", `sleep 600 &\necho $! > ${pidFile}\necho waiting\nwait`);
  const r = await s.apply();
  assert.equal(r.statusCode, 409, r.body);
  const problem = r.json() as Problem;
  assert.equal(problem.hook.outcome, "timed_out");
  assert.match(problem.detail, /^pre-apply hook 10-slow ran past its time-out .* its output ends: waiting$/);
  const child = Number(readFileSync(pidFile, "utf8"));
  // Should the agent have left it running, the test stops it.
  t.after(() => {
    try {
      process.kill(child, "SIGKILL");
    } catch {
      // gone, as it should be
    }
  });
  // Gone, or a zombie waiting for whoever adopted it to reap it: either way it runs no more.
  await waitFor("the hook's child to be gone", () => {
    try {
      return readFileSync(`/proc/${child}/stat`, "utf8").split(") ")[1]?.startsWith("Z") || undefined;
    } catch {
      return true;
    }
  });
  assert.deepEqual(await s.sandbox.installed(), { hka: "1.0", hkk: "1.0" });
});

test("apt: a hook that is not root's, or that its group can write, is refused, named in the refusal and by config check", async (t) => {
  const s = await aptSetup(t);
  const other = s.hooks.add("pre-apply", "10-other", "true");
  chownSync(other, 65534, 65534);
  const r = await s.apply();
  assert.equal(r.statusCode, 409, r.body);
  const problem = r.json() as Problem;
  assert.equal(problem.hook.outcome, "refused");
  assert.match(
    problem.detail,
    /^pre-apply hook 10-other was refused: .*10-other is not safe: it belongs to uid 65534/,
  );
  rmSync(other);
  s.hooks.add("pre-apply", "10-group", "true", 0o775);
  s.hooks.add("post-apply", "10-fine", "true");
  const again = await s.apply();
  assert.equal(again.statusCode, 409, again.body);
  assert.match((again.json() as Problem).detail, /10-group is not safe: it is writable by its group/);
  assert.deepEqual(await s.sandbox.installed(), { hka: "1.0", hkk: "1.0" });

  const check = await runCli(["config", "check"], {
    ...s.agentEnv,
    HOSTKEEPER_DATA_DIR: s.config.agent.dataDir,
  });
  assert.equal(check.code, 0, check.stderr);
  assert.match(
    check.stdout,
    new RegExp(`Hooks in ${s.hooks.dir}: pre-apply: none; post-apply: 10-fine; post-reboot: none\\.`),
  );
  assert.match(check.stdout, /warning: hook pre-apply\/10-group is refused: .* writable by its group/);
  const { log, lines } = capturedLogger("warn");
  await buildTestApp(t, s.agentEnv, { logger: log });
  assert.ok(
    lines.some((l) => /hook pre-apply\/10-group is refused: .* writable by its group/.test(l)),
    lines.join("\n"),
  );
});

test("apt: hooks see the apply's context and packages, and no more of the agent's environment; a post-apply failure is recorded and reported, not failing the apply", async (t) => {
  const receiver = await startReceiver(t);
  const s = await aptSetup(t);
  s.hooks.add("pre-apply", "10-env", 'env | sort\necho ---\ncat "$HOSTKEEPER_PACKAGES_FILE"');
  s.hooks.add(
    "post-apply",
    "10-report",
    'echo "outcome $HOSTKEEPER_APPLY_OUTCOME"\ncat "$HOSTKEEPER_PACKAGES_FILE"\nexit 1',
  );
  s.hooks.add("post-apply", "20-loud", "head -c 100000 /dev/zero | tr '\\0' x");
  const r = await s.apply({ update_type: "full", callback_url: receiver.url });
  assert.equal(r.statusCode, 200, r.body);
  const result = r.json() as {
    id: number;
    upgraded: { name: string; arch: string }[];
    hooks: Hook[] & { output_truncated: boolean }[];
  };
  assert.deepEqual(await s.sandbox.installed(), { hka: "1.1", hkk: "1.1" });
  const [pre, report, loud] = result.hooks;
  assert.equal(result.hooks.length, 3);
  assert.equal(pre?.outcome, "succeeded");
  const [env = "", packages = ""] = pre?.output.split("---\n") ?? [];
  const vars = Object.fromEntries(
    env
      .trim()
      .split("\n")
      .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]),
  );
  const allowed = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PWD", "SHLVL", "_"];
  for (const name of Object.keys(vars))
    assert.ok(
      allowed.includes(name) || /^HOSTKEEPER_(HOOK_|APPLY_|UPDATE_TYPE|TRIGGER|PACKAGES_FILE)/.test(name),
      `${name} is not for hooks`,
    );
  assert.equal(vars.HOSTKEEPER_APPLY_ID, String(result.id));
  assert.equal(vars.HOSTKEEPER_HOOK_STAGE, "pre-apply");
  assert.equal(vars.HOSTKEEPER_UPDATE_TYPE, "full");
  assert.equal(vars.HOSTKEEPER_TRIGGER, "api");
  const arch = result.upgraded[0]?.arch;
  assert.equal(packages, `hka\t${arch}\t1.0\t1.1\nhkk\t${arch}\t1.0\t1.1\n`);
  assert.equal(report?.outcome, "failed");
  assert.equal(report?.exit_code, 1);
  assert.equal(report?.output, `outcome succeeded\nhka\t${arch}\t1.0\t1.1\nhkk\t${arch}\t1.0\t1.1\n`);
  assert.equal(loud?.outcome, "succeeded");
  assert.equal(loud?.output.length, 16 * 1024);
  assert.equal(loud?.output_truncated, true);
  assert.ok(
    !existsSync(join(s.config.agent.dataDir, "hooks", `apply-${result.id}-pre-apply.tsv`)),
    "the packages file is removed",
  );
  // The last event says it too.
  const last = await waitFor("the apply's last event", () =>
    receiver.received.find((w) => w.json.data.state === "completed"),
  );
  assert.deepEqual(
    (last.json.data.hooks as Hook[]).map((h) => [h.name, h.outcome]),
    [
      ["10-env", "succeeded"],
      ["10-report", "failed"],
      ["20-loud", "succeeded"],
    ],
  );
});

test("apt: post-reboot hooks run once, after the report-back of the apply's reboot", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-hookboot-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const boot = join(dir, "boot_id");
  writeFileSync(boot, "11111111-1111-4111-8111-111111111111\n");
  const reboot = rebootMarker(dir);
  const sandbox = await createAptSandbox(t, repo, { install: ["hka=1.0", "hkk=1.0"] });
  const hooks = hooksDir(t);
  const counter = join(dir, "post-reboot-runs");
  hooks.add(
    "post-reboot",
    "10-count",
    `echo "$HOSTKEEPER_APPLY_ID $HOSTKEEPER_HOOK_STAGE" >> ${counter}\necho back`,
  );
  const env = {
    ...aptAgentEnv(sandbox),
    HOSTKEEPER_HOOKS_DIR: hooks.dir,
    HOSTKEEPER_REBOOT_COMMAND: reboot.command,
    HOSTKEEPER_REBOOT_DELAY_MS: "100",
    HOSTKEEPER_BOOT_ID_FILE: boot,
  };
  const dataDir = mkdtempSync(join(tmpdir(), "hk-data-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const first = await buildTestApp(t, env, { dataDir });
  const r = await first.call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", auto_reboot: true },
  });
  assert.equal(r.statusCode, 200, r.body);
  const id = (r.json() as { id: number }).id;
  await waitFor("the reboot command", () => reboot.ranAt());
  assert.ok(!existsSync(counter), "no post-reboot hook before the reboot");
  await first.app.close();

  writeFileSync(boot, "22222222-2222-4222-8222-222222222222\n");
  rmSync(sandbox.rebootRequiredFile, { force: true });
  const second = await buildTestApp(t, env, { dataDir });
  const back = await waitFor("the post-reboot hook's record", async () => {
    const s = (await second.call({ method: "GET", url: `/v1/system/applies/${id}` })).json() as {
      state: string;
      hooks: Hook[];
    };
    return s.hooks.length > 0 ? s : undefined;
  });
  assert.equal(back.state, "back_online");
  assert.deepEqual(
    back.hooks.map((h) => [h.stage, h.name, h.outcome, h.output]),
    [["post-reboot", "10-count", "succeeded", "back\n"]],
  );
  await second.app.close();
  // The same boot again: no report-back, no hook.
  const third = await buildTestApp(t, env, { dataDir });
  await third.app.close();
  assert.equal(readFileSync(counter, "utf8"), `${id} post-reboot\n`);
});

test("dnf: a failing pre-apply hook changes nothing; post-apply output is kept in the apply's record", async (t) => {
  const rpms: RpmSpec[] = [
    { name: "hk-release", version: "9", provides: "system-release(releasever) = 9" },
    { name: "hkone", version: "1.0" },
    { name: "hkone", version: "1.1" },
  ];
  const rpmRepo = await buildRpmRepo(t, rpms, []);
  const root = await createDnfRoot(t, rpmRepo, ["hk-release", "hkone-1.0"]);
  const hooks = hooksDir(t);
  const gate = hooks.add("pre-apply", "10-gate", "echo 'maintenance not allowed'\nexit 2");
  hooks.add("post-apply", "10-done", 'cut -f1,3,4 "$HOSTKEEPER_PACKAGES_FILE"');
  const { call } = await buildTestApp(t, { ...dnfAgentEnv(root), HOSTKEEPER_HOOKS_DIR: hooks.dir });
  const apply = () =>
    call({ method: "POST", url: "/v1/system/apply-updates", payload: { update_type: "full" } });
  const refused = await apply();
  assert.equal(refused.statusCode, 409, refused.body);
  assert.match(
    (refused.json() as Problem).detail,
    /^pre-apply hook 10-gate exited with status 2; its output ends: maintenance not allowed$/,
  );
  assert.match((await root.installed()).hkone ?? "", /^1\.0-/);

  rmSync(gate);
  const r = await apply();
  assert.equal(r.statusCode, 200, r.body);
  assert.match((await root.installed()).hkone ?? "", /^1\.1-/);
  const [done] = (r.json() as { hooks: Hook[] }).hooks;
  assert.equal(done?.name, "10-done");
  assert.match(done?.output ?? "", /^hkone\t1\.0-[^\t]+\t1\.1-\S+\n$/);
  assert.deepEqual(hostPackageState(), hostBefore, "the host's own packages are untouched");
});
