import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import pino from "pino";
import { caddyMemoryEnv, goMemLimit, writeCaddyEnvFile } from "../../src/caddy/process/memory-limit.js";
import { CADDY_MEMORY_LIMIT_DEFAULT_MB } from "../../src/caddy/settings.js";
import { projectRoot } from "../../src/paths.js";

test("the setting becomes Go's GOMEMLIMIT in MiB; 0 is off, which also keeps Caddy from picking a limit of its own", () => {
  assert.equal(goMemLimit(768), "768MiB");
  assert.deepEqual(caddyMemoryEnv(0), { GOMEMLIMIT: "off" });
});

test("the env file holds GOMEMLIMIT, is replaced whole when the setting changes and left alone when not", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-caddy-env-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, "caddy.env");
  const log = pino({ level: "silent" });
  writeCaddyEnvFile(path, 300, log);
  assert.match(readFileSync(path, "utf8"), /^GOMEMLIMIT=300MiB$/m);
  const first = statSync(path);
  writeCaddyEnvFile(path, 300, log);
  assert.equal(statSync(path).ino, first.ino, "an unchanged setting does not rewrite the file");
  writeCaddyEnvFile(path, 0, log);
  assert.match(readFileSync(path, "utf8"), /^GOMEMLIMIT=off$/m);
  assert.notEqual(statSync(path).ino, first.ino, "a changed one replaces it by a rename");
});

test("the packaged Caddy unit's own default is the setting's default", () => {
  const unit = readFileSync(join(projectRoot(), "packaging/hostkeeper-caddy.service"), "utf8");
  assert.match(unit, new RegExp(`^Environment=GOMEMLIMIT=${CADDY_MEMORY_LIMIT_DEFAULT_MB}MiB$`, "m"));
  assert.match(unit, /^EnvironmentFile=-\/var\/lib\/hostkeeper\/caddy\.env$/m);
  const agentUnit = readFileSync(join(projectRoot(), "packaging/hostkeeper.service"), "utf8");
  assert.match(agentUnit, /^Environment=HOSTKEEPER_CADDY_ENV_FILE=\/var\/lib\/hostkeeper\/caddy\.env$/m);
});
