import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { problemLine, runCli, startCliAgent } from "./support.js";

type After = { after: (fn: () => unknown) => void };

const MINUTE = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();

/**
 * An agent whose schedule never opens while the test runs (windows three hours ahead). Should apt run all
 * the same, it reads a root that is an empty folder of its own, and the reboot command does nothing (a
 * missing APT_CONFIG file would let apt work on the host's packages).
 */
async function agentWithoutPackages(t: After) {
  const dir = mkdtempSync(join(tmpdir(), "hk-cli-schedule-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(
    join(dir, "apt.conf"),
    `Dir "${dir}/";\nDir::State::status "${dir}/status";\nDPkg::Options { "--root=${dir}"; "--log=${dir}/dpkg.log"; };\n`,
  );
  const agent = await startCliAgent(t, {
    HOSTKEEPER_PACKAGE_MANAGER: "apt",
    HOSTKEEPER_APT_CONFIG: join(dir, "apt.conf"),
    HOSTKEEPER_REBOOT_COMMAND: "/bin/true",
  });
  const opens = Math.floor(Date.now() / MINUTE) * MINUTE + 180 * MINUTE;
  return { agent, dir, opens, start: iso(opens).slice(11, 16) };
}

describe("schedule", () => {
  test("set from flags, show, clear; show without a schedule is the agent's 404", async (t) => {
    const { agent, opens, start } = await agentWithoutPackages(t);
    const set = await runCli(
      [
        "schedule",
        "set",
        "--days",
        "mon,tue,wed,thu,fri,sat,sun",
        "--start",
        start,
        "--duration",
        "45",
        "--timezone",
        "UTC",
        "--reboot",
        "if_required",
        "--random-delay",
        "0",
      ],
      agent.env,
    );
    assert.equal(set.code, 0, set.stderr);
    const lines = set.stdout.trimEnd().split("\n");
    assert.deepEqual(lines.slice(0, 7), [
      "timezone        UTC",
      "update type     security",
      "reboot          if_required",
      "download ahead  0 min",
      "random delay    up to 0 min",
      "callback        -",
      `next run        ${iso(opens)}`,
    ]);
    assert.match(lines[8] ?? "", /^DAYS +START +MINUTES$/);
    assert.match(lines[9] ?? "", new RegExp(`^mon,tue,wed,thu,fri,sat,sun +${start} +45$`));
    assert.equal(lines.at(-1), "no runs recorded");

    const shown = await runCli(["schedule", "show"], agent.env);
    assert.equal(shown.code, 0, shown.stderr);
    assert.equal(shown.stdout, set.stdout);
    const json = await runCli(["schedule", "show", "--json"], agent.env);
    const body = JSON.parse(json.stdout);
    assert.equal(body.windows[0].duration_minutes, 45);
    assert.equal(body.update_type, "security", "the default type");

    const cleared = await runCli(["schedule", "clear"], agent.env);
    assert.equal(cleared.code, 0, cleared.stderr);
    assert.equal(cleared.stdout, "maintenance schedule removed\n");
    const none = await runCli(["schedule", "show"], agent.env);
    assert.equal(none.code, 1);
    assert.equal(problemLine(none.stderr).code, "schedule_not_found");
    const again = await runCli(["schedule", "clear", "--json"], agent.env);
    assert.equal(again.code, 1);
    assert.equal(JSON.parse(again.stdout).code, "schedule_not_found");
  });

  test("set from a file with several windows; flags and file together, or flags missing, are usage errors", async (t) => {
    const { agent, dir, start } = await agentWithoutPackages(t);
    const file = join(dir, "schedule.json");
    writeFileSync(
      file,
      JSON.stringify({
        windows: [
          { days: ["sat"], start, duration_minutes: 120 },
          { days: ["wed"], start: "12:30", duration_minutes: 30 },
        ],
        timezone: "UTC",
        update_type: "full",
        reboot: "never",
        download_ahead_minutes: 15,
      }),
    );
    const set = await runCli(["schedule", "set", "--file", file, "--json"], agent.env);
    assert.equal(set.code, 0, set.stderr);
    const body = JSON.parse(set.stdout);
    assert.deepEqual(
      body.windows.map((w: { days: string[] }) => w.days),
      [["sat"], ["wed"]],
    );
    assert.equal(body.download_ahead_minutes, 15);

    const both = await runCli(["schedule", "set", "--file", file, "--days", "mon"], agent.env);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /--file cannot be combined with --days/);
    const missing = await runCli(["schedule", "set", "--days", "mon"], agent.env);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /missing --start, --duration/);
    const notJson = join(dir, "bad.json");
    writeFileSync(notJson, "{windows");
    const bad = await runCli(["schedule", "set", "--file", notJson], agent.env);
    // As for routes add --file: the command line was right, the file it names is not.
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /bad\.json is not JSON/);
    const gone = await runCli(["schedule", "set", "--file", join(dir, "no-such.json")], agent.env);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /cannot read .*no-such\.json/);

    // What only the agent knows is its to say, naming the field.
    const late = await runCli(
      ["schedule", "set", "--days", "mon", "--start", "25:00", "--duration", "10", "--timezone", "Mars/Base"],
      agent.env,
    );
    assert.equal(late.code, 1);
    const p = problemLine(late.stderr);
    assert.equal(p.code, "validation_failed");
    assert.match(p.detail, /body\.windows\[0\]\.start/);
    const shown = JSON.parse((await runCli(["schedule", "show", "--json"], agent.env)).stdout);
    assert.equal(shown.update_type, "full", "the refused set changed nothing");
  });
});
