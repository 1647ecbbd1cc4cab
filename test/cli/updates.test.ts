import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import {
  buildAptRepo,
  createAptSandbox,
  type DebSpec,
  debianArch,
  waitingPostinst,
} from "../helpers/apt-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";
import { rebootMarker } from "../helpers/processes.js";
import { waitFor } from "../helpers/wait.js";
import { problemLine, runCli, runInTerminal, startCli, startCliAgent } from "./support.js";

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

/** clisec: a security update; clireg: a regular one. */
const DEBS: DebSpec[] = [
  { name: "clisec", version: "1.0", suites: ["bookworm"] },
  { name: "clisec", version: "1.1", suites: ["bookworm-security"] },
  { name: "clireg", version: "1.0", suites: ["bookworm"] },
  { name: "clireg", version: "1.1", suites: ["bookworm-updates"] },
];

/** An agent on a sandbox holding `debs` at 1.0 (their 1.1 in the repository), as the CLI reaches it. */
async function sandboxAgent(t: TestContext, debs: DebSpec[], env: Record<string, string> = {}) {
  const repo = await buildAptRepo(t, debs, debianArch());
  const names = [...new Set(debs.map((d) => d.name))];
  const sandbox = await createAptSandbox(t, repo, { install: names.map((n) => `${n}=1.0`) });
  const agent = await startCliAgent(t, {
    HOSTKEEPER_PACKAGE_MANAGER: "apt",
    HOSTKEEPER_APT_CONFIG: sandbox.aptConfig,
    HOSTKEEPER_REBOOT_REQUIRED_FILE: sandbox.rebootRequiredFile,
    HOSTKEEPER_NEEDRESTART: "none",
    HOSTKEEPER_SERVICES_RESTART_COMMAND: "none",
    HOSTKEEPER_REBOOT_COMMAND: "true",
    ...env,
  });
  return { sandbox, agent };
}

/** A progress line off a terminal: `apply 1 installing: downloaded 0/0, installed 1/2, clisec (0.4 s)`. */
const PROGRESS = /^apply \d+ [a-z_]+: downloaded (-|\d+\/\d+), installed (-|\d+\/\d+)(, \S+)? \(\d+\.\d s\)$/;

describe("updates", () => {
  test("history of an agent that never applied: empty, and the API's range for --limit", async (t) => {
    // No package manager runs here (and buildTestApp's apt configuration has nothing to change if one did).
    const agent = await startCliAgent(t, { HOSTKEEPER_PACKAGE_MANAGER: "apt" });
    const r = await runCli(["updates", "history"], agent.env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "no applies recorded\n");
    const json = await runCli(["updates", "history", "--json", "--limit", "5"], agent.env);
    assert.deepEqual(JSON.parse(json.stdout), { applies: [] });
    const tooMany = await runCli(["updates", "history", "--limit", "1001"], agent.env);
    assert.equal(tooMany.code, 1);
    assert.equal(problemLine(tooMany.stderr).code, "validation_failed");
  });

  test("check against a sandboxed apt, then the history of an apply made through the API", async (t) => {
    const repo = await buildAptRepo(t, DEBS, debianArch());
    const sandbox = await createAptSandbox(t, repo, { install: ["clisec=1.0", "clireg=1.0"] });
    const dir = mkdtempSync(join(tmpdir(), "hk-cli-reboot-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const agent = await startCliAgent(t, {
      HOSTKEEPER_PACKAGE_MANAGER: "apt",
      HOSTKEEPER_APT_CONFIG: sandbox.aptConfig,
      HOSTKEEPER_REBOOT_REQUIRED_FILE: sandbox.rebootRequiredFile,
      HOSTKEEPER_NEEDRESTART: "none",
      HOSTKEEPER_SERVICES_RESTART_COMMAND: "none",
      HOSTKEEPER_REBOOT_COMMAND: rebootMarker(dir).command,
    });

    const checked = await runCli(["updates", "check"], agent.env, { timeoutMs: 120_000 });
    assert.equal(checked.code, 0, checked.stderr);
    const [summary, header, ...rows] = checked.stdout.trimEnd().split("\n");
    assert.match(
      summary ?? "",
      /^2 updates \(1 security, 1 regular\); reboot required: no; apt, checked \S+$/,
    );
    assert.match(header ?? "", /^PACKAGE +ARCH +CURRENT +NEW +SECURITY +SEVERITY +CVES +HELD$/);
    assert.deepEqual(rows.map((l) => l.split(/ +/)).sort(), [
      ["clireg", "all", "1.0", "1.1", "-", "unknown", "0", "-"],
      ["clisec", "all", "1.0", "1.1", "1.1", "unknown", "0", "-"],
    ]);
    const json = await runCli(["updates", "check", "--json"], agent.env, { timeoutMs: 120_000 });
    assert.equal(JSON.parse(json.stdout).security_updates, 1);

    const applied = await agent.call({
      method: "POST",
      url: "/v1/system/apply-updates",
      payload: { update_type: "security" },
    });
    assert.equal(applied.statusCode, 200, applied.body);
    assert.equal((await sandbox.installed()).clisec, "1.1");

    const history = await runCli(["updates", "history"], agent.env);
    assert.equal(history.code, 0, history.stderr);
    const [hHeader, row, ...rest] = history.stdout.trimEnd().split("\n");
    assert.match(
      hHeader ?? "",
      /^ID +STARTED +TYPE +OUTCOME +UPGRADED +INSTALLED +REMOVED +REBOOT +DURATION +ERROR$/,
    );
    assert.match(row ?? "", /^1 +\S+ +security +succeeded +1 +0 +0 +- +\d+\.\d s +-$/);
    assert.deepEqual(rest, []);
  });

  test("apply follows an async apply to its end in plain lines; follow shows it again; --json prints the records", async (t) => {
    // A restart command standing in for needrestart: what it names ends the summary.
    const dir = mkdtempSync(join(tmpdir(), "hk-cli-restart-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, "restart"), "#!/bin/sh\necho NEEDRESTART-SVC: cron.service\n", { mode: 0o755 });
    const { sandbox, agent } = await sandboxAgent(t, DEBS, {
      HOSTKEEPER_SERVICES_RESTART_COMMAND: join(dir, "restart"),
    });
    const r = await runCli(["updates", "apply"], agent.env, { timeoutMs: 120_000 });
    assert.equal(r.code, 0, r.stderr);
    assert.ok(!r.stdout.includes("\r") && !r.stdout.includes("\x1b"), "no terminal control off a terminal");
    const lines = r.stdout.trimEnd().split("\n");
    const end = lines.findIndex((l) => l.startsWith("apply 1 completed in "));
    assert.ok(end > 0, r.stdout);
    for (const l of lines.slice(0, end)) assert.match(l, PROGRESS);
    assert.match(
      lines[end - 1] ?? "",
      /^apply 1 completed: downloaded \d+\/\d+, installed 1\/1 \(\d+\.\d s\)$/,
    );
    assert.match(
      lines[end] ?? "",
      /^apply 1 completed in \d+\.\d s: 1 upgraded, 0 installed, 0 removed, 0 held back$/,
    );
    assert.deepEqual(lines.slice(end + 1), [
      "  clisec 1.0 -> 1.1",
      "reboot required: no",
      "to restart: cron.service",
    ]);
    assert.equal((await sandbox.installed()).clisec, "1.1");

    const again = await runCli(["updates", "follow", "1"], agent.env);
    assert.equal(again.code, 0, again.stderr);
    // An apply that is over: its last line, with its duration, and the same summary.
    assert.deepEqual(again.stdout.trimEnd().split("\n"), lines.slice(end - 1));

    const json = await runCli(["updates", "apply", "--full", "--json"], agent.env, { timeoutMs: 120_000 });
    assert.equal(json.code, 0, json.stderr);
    const records = json.stdout
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    assert.equal(records[0].state, "queued");
    assert.equal(records.at(-1).state, "completed");
    assert.ok(records.every((s: { id: number }) => s.id === 2));
    assert.deepEqual(
      records.at(-1).upgraded.map((u: { name: string }) => u.name),
      ["clireg"],
    );
  });

  test("on a terminal, one live line rewritten in place, then the summary", async (t) => {
    const { agent } = await sandboxAgent(t, DEBS);
    const r = await runInTerminal(t, ["updates", "apply", "--full"], agent.env);
    assert.equal(r.code, 0, r.stdout);
    const [live = "", ...summary] = r.stdout.split("\r\n");
    // Each state of the apply overwrites the line before it: return, clear the line, the new line.
    const shown = live.split("\r\x1b[2K").slice(1);
    assert.ok(shown.length >= 2, JSON.stringify(r.stdout));
    for (const l of shown) assert.match(l, PROGRESS);
    assert.match(shown.at(-1) ?? "", /^apply 1 completed: /);
    assert.match(summary[0] ?? "", /^apply 1 completed in \d+\.\d s: 2 upgraded/);
  });

  test("download only: the packages in scope, nothing installed; --reboot does not go with it", async (t) => {
    const { sandbox, agent } = await sandboxAgent(t, DEBS);
    const r = await runCli(["updates", "apply", "--download-only", "--full"], agent.env, {
      timeoutMs: 120_000,
    });
    assert.equal(r.code, 0, r.stderr);
    const [first, second, header, ...rows] = r.stdout.trimEnd().split("\n");
    assert.equal(first, "downloading full updates");
    // A file: source is read in place: apt copies nothing into its cache.
    assert.match(second ?? "", /^downloaded 0 files \(0 bytes\) for 2 packages in \d+\.\d s$/);
    assert.match(header ?? "", /^PACKAGE +ARCH +CURRENT +NEW$/);
    assert.deepEqual(rows.map((l) => l.split(/ +/)).sort(), [
      ["clireg", "all", "1.0", "1.1"],
      ["clisec", "all", "1.0", "1.1"],
    ]);
    assert.equal((await sandbox.installed()).clisec, "1.0");
    const both = await runCli(["updates", "apply", "--download-only", "--reboot"], agent.env);
    assert.equal(both.code, 2);
    assert.match(
      both.stderr,
      /^hostkeeper: --reboot does not go with --download-only\nusage: hostkeeper updates apply/,
    );
  });

  test("an apply that fails exits 1 saying why; one the disk guard refuses exits 1 with the 507", async (t) => {
    const bad: DebSpec[] = [
      { name: "clibad", version: "1.0", suites: ["bookworm"] },
      { name: "clibad", version: "1.1", suites: ["bookworm-security"], postinst: "exit 1" },
    ];
    const { sandbox, agent } = await sandboxAgent(t, bad);
    const r = await runCli(["updates", "apply"], agent.env, { timeoutMs: 120_000 });
    assert.equal(r.code, 1, r.stdout);
    assert.match(
      r.stderr,
      /^hostkeeper: apply 1 failed: package_manager_failed: apt-get upgrade --with-new-pkgs failed/,
    );
    assert.match(r.stdout, /^apply 1 failed in \d+\.\d s: /m);

    const full = await startCliAgent(t, {
      HOSTKEEPER_PACKAGE_MANAGER: "apt",
      HOSTKEEPER_APT_CONFIG: sandbox.aptConfig,
      HOSTKEEPER_MIN_FREE_MB: "1000000000",
    });
    const refused = await runCli(["updates", "apply"], full.env, { timeoutMs: 60_000 });
    assert.equal(refused.code, 1);
    assert.equal(refused.stdout, "");
    const p = problemLine(refused.stderr);
    assert.equal(p.status, 507);
    assert.equal(p.code, "insufficient_storage");
  });

  test("Ctrl-C stops following only: the apply goes on, and follow picks it up again", async (t) => {
    const slow: DebSpec[] = [
      { name: "clislow", version: "1.0", suites: ["bookworm"] },
      { name: "clislow", version: "1.1", suites: ["bookworm-updates"], postinst: waitingPostinst("clislow") },
    ];
    const { sandbox, agent } = await sandboxAgent(t, slow);
    const release = join(sandbox.root, "release-clislow");
    // Lets the postinst go on if the test fails (the sandbox may be gone by then).
    t.after(() => existsSync(sandbox.root) && writeFileSync(release, ""));
    const cli = startCli(t, ["updates", "apply", "--full"], agent.env);
    await waitFor("the CLI to show clislow installing", () =>
      /^apply 1 installing: .*, clislow /m.test(cli.stdout()) ? true : undefined,
    );
    assert.equal(await cli.interrupt(), 130, cli.stderr());
    assert.equal(
      cli.stderr(),
      "hostkeeper: stopped following; apply 1 goes on: follow it again with hostkeeper updates follow 1\n",
    );
    const status = await agent.call({ method: "GET", url: "/v1/system/applies/1" });
    assert.equal(status.json().state, "installing");

    writeFileSync(release, "");
    const again = await runCli(["updates", "follow", "1"], agent.env, { timeoutMs: 90_000 });
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /^apply 1 completed in \d+\.\d s: 1 upgraded/m);
    assert.equal((await sandbox.installed()).clislow, "1.1");
  });

  test("the host's own package state is untouched", () => {
    assert.deepEqual(hostPackageState(), hostBefore);
  });
});
