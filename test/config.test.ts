import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { CONFIG_PAGE, pageWithTable } from "../scripts/config-table.js";
import { ConfigError } from "../src/config.js";
import { projectRoot } from "../src/paths.js";
import { allSettings, loadConfig } from "../src/settings.js";

test("defaults: loopback listen, srv0, :80/:443, no Caddy admin (embedded)", () => {
  const c = loadConfig({ env: {} });
  assert.deepEqual(c.agent.listen, { host: "127.0.0.1", port: 8626 });
  assert.equal(c.proxy.caddyServer, "srv0");
  assert.deepEqual(c.proxy.caddyListen, [":80", ":443"]);
  assert.equal(c.proxy.caddyAdmin, undefined);
});

test("environment wins over the file, the file over the default", () => {
  const c = loadConfig({
    env: { HOSTKEEPER_CADDY_SERVER: "fromenv" },
    file: { caddyServer: "fromfile", listen: "0.0.0.0:9000" },
  });
  assert.equal(c.proxy.caddyServer, "fromenv");
  assert.deepEqual(c.agent.listen, { host: "0.0.0.0", port: 9000 });
});

test("Caddy admin accepts http://host:port and unix:/path", () => {
  const tcp = loadConfig({ env: { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:2019" } }).proxy.caddyAdmin;
  assert.equal(tcp?.kind, "tcp");
  const unix = loadConfig({ env: { HOSTKEEPER_CADDY_ADMIN: "unix:/run/caddy/admin.sock" } }).proxy.caddyAdmin;
  assert.deepEqual(unix, { kind: "unix", socketPath: "/run/caddy/admin.sock" });
});

test("a bad value names its setting", () => {
  for (const [env, value] of [
    ["HOSTKEEPER_LISTEN", "nonsense"],
    ["HOSTKEEPER_CADDY_ADMIN", "ftp://x"],
    ["HOSTKEEPER_WEBHOOK_SECRET", "whsec_short"],
    ["HOSTKEEPER_TOKEN", "short"],
    ["HOSTKEEPER_OPERATOR_DOMAIN", "ops.example.test:443"],
  ] as const) {
    assert.throws(
      () => loadConfig({ env: { [env]: value } }),
      (err: unknown) => err instanceof ConfigError && err.message.includes(env),
      env,
    );
  }
  assert.throws(
    () => loadConfig({ env: {}, file: { caddyServr: "x" } }),
    /caddyServr \(config file\): unknown setting/,
  );
});

test("the operator's domain is held as its route id", () => {
  const c = loadConfig({ env: { HOSTKEEPER_OPERATOR_DOMAIN: "Ops.Bücher.example." } });
  assert.equal(c.proxy.operatorDomain, "ops.xn--bcher-kva.example");
});

test("every setting has a distinct HOSTKEEPER_ variable and file key", () => {
  const s = allSettings();
  assert.equal(new Set(s.map((x) => x.env)).size, s.length);
  assert.equal(new Set(s.map((x) => x.key)).size, s.length);
  for (const x of s) assert.match(x.env, /^HOSTKEEPER_[A-Z0-9_]+$/);
});

test("the configuration page's settings table is the one generated from the settings", () => {
  const page = readFileSync(join(projectRoot(), CONFIG_PAGE), "utf8");
  assert.equal(
    page,
    pageWithTable(page),
    `run \`npm run build && npm run docs:config\` and commit ${CONFIG_PAGE}`,
  );
});

test("the agent refuses to start on invalid configuration with one clear message", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-cfg-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, "config.json");
  writeFileSync(file, JSON.stringify({ caddyServer: "srv0", listen: "127.0.0.1:99999" }));
  const r = spawnSync(process.execPath, [join(projectRoot(), "dist/src/cli/main.js"), "serve"], {
    env: { PATH: process.env.PATH, HOSTKEEPER_CONFIG: file, HOSTKEEPER_DATA_DIR: dir },
    encoding: "utf8",
    timeout: 20_000,
  });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /^hostkeeper: invalid configuration: listen \(config file\): .*99999/);
  assert.equal(r.stderr.trim().split("\n").length, 1);
});
