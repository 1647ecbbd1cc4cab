import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { packageVersion } from "../../src/paths.js";
import { freePort, httpRequest } from "../../support/loopback.js";
import { runCli } from "./support.js";

const COMMANDS = [
  ["serve"],
  ["status"],
  ["routes", "list"],
  ["routes", "get"],
  ["routes", "add"],
  ["routes", "rm"],
  ["updates", "check"],
  ["updates", "apply"],
  ["updates", "follow"],
  ["updates", "history"],
  ["operator", "status"],
  ["agent", "update"],
  ["config", "check"],
  ["token", "show"],
  ["token", "rotate"],
  ["connect", "show"],
];

/** A refusal of the command line: exit 2, the reason, then a usage line, nothing on stdout. */
function assertUsageError(r: { code: number | null; stdout: string; stderr: string }, reason: RegExp) {
  assert.equal(r.code, 2, r.stderr);
  assert.equal(r.stdout, "");
  const [first, second, ...rest] = r.stderr.split("\n");
  assert.match(first ?? "", reason);
  assert.match(second ?? "", /^usage: hostkeeper /);
  assert.deepEqual(rest, [""]);
}

describe("help and version", () => {
  test("--version prints the package's version", async () => {
    const r = await runCli(["--version"], {});
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `hostkeeper ${packageVersion()}\n`);
  });

  test("--help lists every command", async () => {
    const r = await runCli(["--help"], {});
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^usage: hostkeeper <command>/);
    for (const words of COMMANDS) assert.match(r.stdout, new RegExp(`^  ${words.join(" ")} `, "m"));
    assert.match(r.stdout, /Exit codes: 0 success; 1 failure/);
  });

  for (const words of COMMANDS)
    test(`${words.join(" ")} --help shows its usage and options`, async () => {
      const r = await runCli([...words, "--help"], {});
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, new RegExp(`^usage: hostkeeper ${words.join(" ")}\\b`));
      assert.match(r.stdout, /^ {2}-h, --help {2}/m);
      if (words[0] !== "serve") assert.match(r.stdout, /^ {2}--json /m);
    });

  for (const group of ["routes", "updates", "operator", "agent", "config", "token", "connect"])
    test(`${group} --help lists its commands`, async () => {
      const r = await runCli([group, "-h"], {});
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, new RegExp(`^usage: hostkeeper ${group} `));
      for (const words of COMMANDS.filter((w) => w[0] === group))
        assert.match(r.stdout, new RegExp(`hostkeeper ${words.join(" ")}`));
    });

  test("serve --help never starts the agent", async (t) => {
    const parent = mkdtempSync(join(tmpdir(), "hk-cli-serve-"));
    const dataDir = join(parent, "data");
    t.after(() => rmSync(parent, { recursive: true, force: true }));
    const port = await freePort();
    const r = await runCli(["serve", "--help"], {
      HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
      HOSTKEEPER_DATA_DIR: dataDir,
      HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9",
    });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^usage: hostkeeper serve\n/);
    assert.equal(existsSync(dataDir), false, "no data dir, so no database and no token");
    await assert.rejects(httpRequest(port, "GET", "/healthz"), /ECONNREFUSED/);
  });

  test("help wins over bad arguments on the same line", async () => {
    const r = await runCli(["routes", "add", "--bogus", "--help"], {});
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^usage: hostkeeper routes add <domain> <upstream>\.\.\./);
  });
});

describe("refused command lines exit 2 with a usage line", () => {
  test("no command", async () => {
    assertUsageError(await runCli([], {}), /^hostkeeper: missing command$/);
  });

  test("an unknown command", async () => {
    assertUsageError(await runCli(["deploy"], {}), /^hostkeeper: unknown command "deploy"$/);
  });

  test("an unknown subcommand", async () => {
    const r = await runCli(["routes", "move", "a"], {});
    assertUsageError(r, /^hostkeeper: unknown routes command "move"$/);
    assert.match(r.stderr, /usage: hostkeeper routes list\|get\|add\|rm/);
  });

  test("a group without its subcommand", async () => {
    assertUsageError(await runCli(["updates"], {}), /^hostkeeper: missing updates command$/);
  });

  test("an unknown option", async () => {
    assertUsageError(await runCli(["routes", "list", "--all"], {}), /^hostkeeper: unknown option --all$/);
  });

  test("an unknown top-level option", async () => {
    assertUsageError(await runCli(["--verbose", "status"], {}), /^hostkeeper: unknown option --verbose$/);
  });

  test("a missing argument", async () => {
    assertUsageError(
      await runCli(["routes", "add", "only.example.test"], {}),
      /^hostkeeper: missing arguments: <domain> <upstream>\.\.\.$/,
    );
  });

  test("an extra argument", async () => {
    assertUsageError(await runCli(["status", "now"], {}), /^hostkeeper: unexpected argument "now"$/);
  });

  test("an option without its value", async () => {
    assertUsageError(
      await runCli(["routes", "rm", "a.example.test", "--callback-url"], {}),
      /^hostkeeper: --callback-url needs a value \(URL\)$/,
    );
  });

  test("a value the option cannot take", async () => {
    assertUsageError(
      await runCli(["updates", "history", "--limit", "ten"], {}),
      /^hostkeeper: --limit must be a positive integer, got "ten"$/,
    );
  });

  test("a flag given a value", async () => {
    assertUsageError(
      await runCli(["config", "check", "--json=yes"], {}),
      /^hostkeeper: --json takes no value$/,
    );
  });

  test("serve takes no --json", async () => {
    assertUsageError(await runCli(["serve", "--json"], {}), /^hostkeeper: unknown option --json$/);
  });

  test("an upstream weight that is no number", async () => {
    assertUsageError(
      await runCli(["routes", "add", "w.example.test", "127.0.0.1:80=heavy"], {}),
      /^hostkeeper: upstream "127\.0\.0\.1:80=heavy": the weight after = must be a whole number$/,
    );
  });
});
