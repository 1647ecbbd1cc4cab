import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { allSettings } from "../../src/settings.js";
import { freePort } from "../../support/loopback.js";
import { cannotRunAs } from "../helpers/users.js";
import { runCli } from "./support.js";

const TOKEN = "cli-config-token-0123456789";
const SECRET = `whsec_${Buffer.alloc(32, 9).toString("base64")}`;
const DB_PASSWORD = "s3cr3t-db-password";

function tempDir(t: { after: (fn: () => unknown) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-cli-config-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The SETTING -> [SOURCE, VALUE] rows of the table. */
function rows(stdout: string): Record<string, [string, string]> {
  // The table ends at the first blank line (what the agent does to Caddy at start follows it).
  const [table = ""] = stdout.split("\n\n");
  const [, header, ...body] = table.trimEnd().split("\n");
  assert.match(header ?? "", /^SETTING +SOURCE +VALUE$/);
  return Object.fromEntries(
    body.map((l) => {
      const [env, source, ...value] = l.split(/ {2,}/);
      return [env, [source, value.join("  ")]];
    }),
  );
}

describe("config check", () => {
  test("every effective value with its source, secrets masked", async (t) => {
    const dir = tempDir(t);
    const file = join(dir, "config.json");
    writeFileSync(file, JSON.stringify({ caddyServer: "fromfile", listen: "10.0.0.1:1" }));
    const r = await runCli(["config", "check"], {
      HOSTKEEPER_CONFIG: file,
      HOSTKEEPER_LISTEN: "[::]:9100",
      HOSTKEEPER_DATA_DIR: dir,
      HOSTKEEPER_TOKEN: TOKEN,
      HOSTKEEPER_WEBHOOK_SECRET: SECRET,
      HOSTKEEPER_OPERATOR_ENV: JSON.stringify({ DATABASE_URL: `postgres://op:${DB_PASSWORD}@db/op` }),
      HOSTKEEPER_REBOOT_COMMAND: "shutdown -r now",
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.split("\n")[0], `configuration is valid; config file: ${file}`);
    for (const secret of [TOKEN, SECRET, DB_PASSWORD]) assert.ok(!r.stdout.includes(secret), secret);
    const table = rows(r.stdout);
    assert.deepEqual(
      Object.keys(table),
      allSettings().map((s) => s.env),
    );
    assert.deepEqual(table.HOSTKEEPER_LISTEN, ["environment", "[::]:9100"]);
    assert.deepEqual(table.HOSTKEEPER_CADDY_SERVER, ["file", "fromfile"]);
    assert.deepEqual(table.HOSTKEEPER_CADDY_TIMEOUT_MS, ["default", "30000"]);
    assert.deepEqual(table.HOSTKEEPER_TOKEN, ["environment", "[masked]"]);
    assert.deepEqual(table.HOSTKEEPER_WEBHOOK_SECRET, ["environment", "[masked]"]);
    assert.deepEqual(table.HOSTKEEPER_OPERATOR_ENV, ["environment", '{"DATABASE_URL":"[masked]"}']);
    assert.deepEqual(table.HOSTKEEPER_REBOOT_COMMAND, ["environment", "shutdown -r now"]);
    assert.deepEqual(table.HOSTKEEPER_CADDY_ADMIN, ["default", "(embedded Caddy)"]);
  });

  test("--json: the same, for scripts", async (t) => {
    const dir = tempDir(t);
    const r = await runCli(["config", "check", "--json"], {
      HOSTKEEPER_DATA_DIR: dir,
      HOSTKEEPER_TOKEN: TOKEN,
      HOSTKEEPER_CADDY_ADMIN: "unix:/run/caddy/admin.sock",
    });
    assert.equal(r.code, 0, r.stderr);
    assert.ok(!r.stdout.includes(TOKEN));
    const out = JSON.parse(r.stdout);
    assert.equal(out.valid, true);
    const byEnv = Object.fromEntries(
      out.settings.map((s: { env: string; source: string; value: unknown }) => [s.env, s]),
    );
    assert.deepEqual(byEnv.HOSTKEEPER_TOKEN, {
      env: "HOSTKEEPER_TOKEN",
      key: "token",
      source: "environment",
      value: "[masked]",
    });
    assert.deepEqual(byEnv.HOSTKEEPER_CADDY_ADMIN.value, {
      kind: "unix",
      socketPath: "/run/caddy/admin.sock",
    });
    assert.equal(byEnv.HOSTKEEPER_WEBHOOK_SECRET.value, null);
    assert.equal(byEnv.HOSTKEEPER_LOG_LEVEL.source, "default");
  });

  test("says which of Caddy's settings the agent writes at start: all on its embedded Caddy, on one of yours only those set", async (t) => {
    const dir = tempDir(t);
    const said = async (env: Record<string, string>) => {
      const r = await runCli(["config", "check"], { HOSTKEEPER_DATA_DIR: dir, ...env });
      assert.equal(r.code, 0, r.stderr);
      const json = await runCli(["config", "check", "--json"], { HOSTKEEPER_DATA_DIR: dir, ...env });
      return {
        text: r.stdout.trimEnd().split("\n").at(-1),
        applied: JSON.parse(json.stdout).caddy_settings_applied,
      };
    };
    assert.deepEqual(await said({}), {
      text: "At start, the embedded Caddy gets every TLS, port and grace_period setting.",
      applied: "all",
    });
    const own = { HOSTKEEPER_CADDY_ADMIN: "unix:/run/caddy/admin.sock" };
    assert.deepEqual(await said(own), {
      text: "At start, a Caddy of your own: its TLS app, ports, automatic HTTPS and grace_period are left as its owner set them (no setting of them is set).",
      applied: [],
    });
    const asked = await said({
      ...own,
      HOSTKEEPER_TLS_ISSUER: "internal",
      HOSTKEEPER_CADDY_GRACE_PERIOD_MS: "5000",
    });
    assert.deepEqual(asked.applied, ["HOSTKEEPER_TLS_ISSUER", "HOSTKEEPER_CADDY_GRACE_PERIOD_MS"]);
    assert.match(
      asked.text ?? "",
      /the agent applies HOSTKEEPER_TLS_ISSUER, HOSTKEEPER_CADDY_GRACE_PERIOD_MS;/,
    );
  });

  test("a bad value: the agent's own message, exit 2, and nothing on stdout", async (t) => {
    const dir = tempDir(t);
    const env = {
      HOSTKEEPER_DATA_DIR: dir,
      HOSTKEEPER_CADDY_TIMEOUT_MS: "soon",
      // Were the value accepted, serve would start: never on the default port, nor with a Caddy of its own.
      HOSTKEEPER_LISTEN: `127.0.0.1:${await freePort()}`,
      HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9",
    };
    const r = await runCli(["config", "check"], env);
    assert.equal(r.code, 2);
    assert.equal(r.stdout, "");
    assert.equal(
      r.stderr,
      'hostkeeper: invalid configuration: HOSTKEEPER_CADDY_TIMEOUT_MS: expected an integer, got "soon"\n',
    );
    const served = await runCli(["serve"], env);
    assert.equal(served.code, 2);
    assert.equal(served.stderr, r.stderr, "serve refuses the same configuration with the same message");
  });

  test("an unknown key in the config file is refused", async (t) => {
    const dir = tempDir(t);
    const file = join(dir, "config.json");
    writeFileSync(file, JSON.stringify({ caddyServr: "srv0" }));
    const r = await runCli(["config", "check"], { HOSTKEEPER_CONFIG: file });
    assert.equal(r.code, 2);
    assert.equal(r.stderr, "hostkeeper: invalid configuration: caddyServr (config file): unknown setting\n");
  });

  test("an operator domain that can be no route is refused", async () => {
    const r = await runCli(["config", "check"], { HOSTKEEPER_OPERATOR_DOMAIN: "ops.example.test/admin" });
    assert.equal(r.code, 2);
    assert.match(
      r.stderr,
      /^hostkeeper: invalid configuration: HOSTKEEPER_OPERATOR_DOMAIN: must be a host name/,
    );
  });

  test("every command that reads the configuration refuses a bad one with exit 2", async () => {
    const r = await runCli(["routes", "list"], { HOSTKEEPER_LISTEN: "nowhere" });
    assert.equal(r.code, 2);
    assert.equal(
      r.stderr,
      'hostkeeper: invalid configuration: HOSTKEEPER_LISTEN: expected host:port, got "nowhere"\n',
    );
  });
});

describe("token show", () => {
  test("prints the token of <data dir>/token", async (t) => {
    const dir = tempDir(t);
    writeFileSync(join(dir, "token"), `${TOKEN}\n`, { mode: 0o600 });
    const r = await runCli(["token", "show"], { HOSTKEEPER_DATA_DIR: dir });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `${TOKEN}\n`);
    const json = await runCli(["token", "show", "--json"], { HOSTKEEPER_DATA_DIR: dir });
    assert.deepEqual(JSON.parse(json.stdout), { token: TOKEN, source: join(dir, "token") });
  });

  test("HOSTKEEPER_TOKEN wins over the file, as in the agent", async (t) => {
    const dir = tempDir(t);
    writeFileSync(join(dir, "token"), "the-file-token-0123456789\n", { mode: 0o600 });
    const r = await runCli(["token", "show", "--json"], {
      HOSTKEEPER_DATA_DIR: dir,
      HOSTKEEPER_TOKEN: TOKEN,
    });
    assert.deepEqual(JSON.parse(r.stdout), { token: TOKEN, source: "HOSTKEEPER_TOKEN" });
  });

  test("no token file: a clear message, exit 1, and no file created", async (t) => {
    const dir = tempDir(t);
    const r = await runCli(["token", "show"], { HOSTKEEPER_DATA_DIR: dir });
    assert.equal(r.code, 1);
    assert.equal(
      r.stderr,
      `hostkeeper: no token in ${join(dir, "token")}: the agent writes it at its first start (or set HOSTKEEPER_TOKEN)\n`,
    );
    assert.equal(existsSync(join(dir, "token")), false);
  });

  test("a user who cannot read the token file is refused with a clear message", async (t) => {
    const nobody = 65534;
    const why = cannotRunAs(nobody);
    if (why) {
      t.skip(why);
      return;
    }
    const dir = tempDir(t);
    // The agent's own modes: data dir 0700, token 0600, both root's.
    chmodSync(dir, 0o700);
    writeFileSync(join(dir, "token"), `${TOKEN}\n`, { mode: 0o600 });
    const r = await runCli(["token", "show"], { HOSTKEEPER_DATA_DIR: dir }, { uid: nobody, gid: nobody });
    assert.equal(r.code, 1, r.stderr);
    assert.equal(r.stdout, "");
    assert.equal(
      r.stderr,
      `hostkeeper: cannot read the token file ${join(dir, "token")}: permission denied (it is readable by root only: run as root, or set HOSTKEEPER_TOKEN)\n`,
    );
  });
});
