import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { buildAptRepo, createAptSandbox, type DebSpec, debianArch } from "../helpers/apt-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";
import { rebootMarker } from "../helpers/processes.js";
import { problemLine, runCli, startCliAgent } from "./support.js";

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

/** clisec: a security update; clireg: a regular one. */
const DEBS: DebSpec[] = [
  { name: "clisec", version: "1.0", suites: ["bookworm"] },
  { name: "clisec", version: "1.1", suites: ["bookworm-security"] },
  { name: "clireg", version: "1.0", suites: ["bookworm"] },
  { name: "clireg", version: "1.1", suites: ["bookworm-updates"] },
];

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

  test("the host's own package state is untouched", () => {
    assert.deepEqual(hostPackageState(), hostBefore);
  });
});
