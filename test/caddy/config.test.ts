import assert from "node:assert/strict";
import { type TestContext, test } from "node:test";
import pino from "pino";
import { CaddyAdmin, CaddyApiError } from "../../src/caddy/admin.js";
import { CaddyConfig } from "../../src/caddy/config.js";
import { prepareServer } from "../../src/caddy/process/managed-server.js";
import { freePort } from "../../support/loopback.js";
import { startCaddy } from "../helpers/caddy.js";

// CaddyConfig, the one way the agent writes Caddy's config outside the route batches, against a real Caddy:
// which write it chooses, that it writes nothing when the config is in line, how it retries a lost race,
// and how it answers a path whose parent is missing.

const LEVEL = ["logging", "logs", "extra", "level"];

const INCLUDE = ["logging", "logs", "extra", "include"];

/**
 * A Caddy, a client of its own whose writes (and the status of those Caddy refused) are recorded, and
 * CaddyConfig on it. `beforeWrite` runs before each write reaches Caddy: another writer's change landing
 * between CaddyConfig's read and its write.
 */
async function setup(t: TestContext) {
  const caddy = await startCaddy(t);
  const admin = new CaddyAdmin({ kind: "tcp", url: new URL(caddy.adminUrl) }, 10_000);
  const realWrite = admin.write.bind(admin);
  const writes: string[] = [];
  const hooks = { beforeWrite: async () => {} };
  t.mock.method(admin, "write", async (...args: Parameters<CaddyAdmin["write"]>) => {
    await hooks.beforeWrite();
    try {
      await realWrite(...args);
      writes.push(`${args[0]} ${args[1]}`);
    } catch (err) {
      writes.push(`${args[0]} ${args[1]} ${(err as CaddyApiError).status}`);
      throw err;
    }
  });
  const read = async (path: string) => JSON.parse((await caddy.admin.read(path)).text) as unknown;
  return { caddy, admin, config: new CaddyConfig(admin), writes, read, hooks };
}

test("a value under missing parents is created by one PUT of the first missing key, holding the rest", async (t) => {
  const { config, writes, read } = await setup(t);
  assert.equal(await read("/config/logging"), null);
  const done = await config.update(LEVEL, () => "INFO");
  assert.deepEqual(done, { written: true, missing: false, before: undefined, created: ["logging"] });
  assert.deepEqual(writes, ["PUT /config/logging"]);
  assert.deepEqual(await read("/config/logging"), { logs: { extra: { level: "INFO" } } });
});

test("a value there is replaced by PATCH, removed by DELETE, and left alone when in line", async (t) => {
  const { config, writes, read } = await setup(t);
  await config.update(LEVEL, () => "INFO");
  writes.length = 0;

  const seen: unknown[] = [];
  const patched = await config.update(LEVEL, (current) => {
    seen.push(current);
    return "DEBUG";
  });
  assert.deepEqual(seen, ["INFO"]);
  assert.equal(patched.written, true);
  assert.equal(patched.before, "INFO");
  assert.equal(await read("/config/logging/logs/extra/level"), "DEBUG");

  // The same value, and the same object with its keys in another order: no write.
  assert.equal((await config.update(LEVEL, () => "DEBUG")).written, false);
  await config.update(INCLUDE, () => ["a"]);
  writes.length = 0;
  const extra = ["logging", "logs", "extra"];
  assert.equal((await config.update(extra, () => ({ include: ["a"], level: "DEBUG" }))).written, false);
  assert.equal(await config.differs(LEVEL, () => "DEBUG"), false);
  assert.equal(await config.differs(LEVEL, () => "WARN"), true);
  // A text that says it is in line is not parsed, nor `want` asked.
  const inLine = await config.update(LEVEL, () => assert.fail("want asked"), { inLine: () => true });
  assert.equal(inLine.written, false);

  const deleted = await config.update(LEVEL, () => undefined);
  assert.equal(deleted.written, true);
  assert.deepEqual(await read("/config/logging/logs/extra"), { include: ["a"] });
  // Nothing there and nothing wanted: in line.
  assert.equal((await config.update(LEVEL, () => undefined)).written, false);
  assert.deepEqual(writes, ["DELETE /config/logging/logs/extra/level"]);
});

test("a write that lost a race to another writer is planned again from a new read", async (t) => {
  const { caddy, config, writes, read, hooks } = await setup(t);
  await config.update(INCLUDE, () => ["a"]);
  writes.length = 0;
  // Another writer changes the value between this read and this write, once.
  let raced = false;
  hooks.beforeWrite = async () => {
    if (raced) return;
    raced = true;
    await caddy.admin.write("PATCH", "/config/logging/logs/extra/include", ["x"]);
  };
  const seen: unknown[] = [];
  const done = await config.update(INCLUDE, (current) => {
    seen.push(current);
    return [...(current as string[]), "b"];
  });
  assert.equal(done.written, true);
  assert.deepEqual(seen, [["a"], ["x"]], "computed again from what the other writer left");
  assert.deepEqual(writes, [
    "PATCH /config/logging/logs/extra/include 412",
    "PATCH /config/logging/logs/extra/include",
  ]);
  assert.deepEqual(await read("/config/logging/logs/extra/include"), ["x", "b"]);
});

test("a creation that lost its race is planned again: the key is there now, and is patched", async (t) => {
  const { caddy, config, writes, read, hooks } = await setup(t);
  let raced = false;
  hooks.beforeWrite = async () => {
    if (raced) return;
    raced = true;
    await caddy.admin.write("POST", "/config/logging", { logs: { extra: { include: ["x"] } } });
  };
  const done = await config.update(INCLUDE, (current) => [...((current as string[] | undefined) ?? []), "b"]);
  assert.equal(done.written, true);
  assert.equal(writes.length, 2);
  assert.match(writes[0] ?? "", /^PUT \/config\/logging (409|412)$/);
  assert.equal(writes[1], "PATCH /config/logging/logs/extra/include");
  assert.deepEqual(await read("/config/logging/logs/extra/include"), ["x", "b"]);
});

test("the third lost race is thrown", async (t) => {
  const { caddy, config, writes, hooks } = await setup(t);
  await config.update(INCLUDE, () => ["a"]);
  writes.length = 0;
  let other = 0;
  hooks.beforeWrite = async () => {
    other++;
    await caddy.admin.write("PATCH", "/config/logging/logs/extra/include", [`x${other}`]);
  };
  await assert.rejects(
    config.update(INCLUDE, (current) => [...(current as string[]), "b"]),
    (err: unknown) => err instanceof CaddyApiError && err.status === 412,
  );
  assert.deepEqual(writes, Array(3).fill("PATCH /config/logging/logs/extra/include 412"));
});

test("a path whose parent is missing is answered as missing, and nothing is written", async (t) => {
  const { config, writes } = await setup(t);
  const logs = ["apps", "http", "servers", "nope", "logs"];
  // The server must exist (4 leading keys): its `logs` waits for it.
  const done = await config.update(logs, () => assert.fail("want asked"), { needs: 4 });
  assert.deepEqual(done, { written: false, missing: true, before: undefined });
  assert.equal(await config.differs(logs, () => ({}), { needs: 4 }), false);
  assert.equal(await config.value(logs), undefined);
  assert.equal(await config.value(["apps", "http", "servers", "nope"]), undefined);
  assert.deepEqual(await config.value(["apps", "http", "servers", "srv0", "routes"]), []);
  // A read below the server answered 400: the server is missing; srv0 is not.
  assert.equal(await config.isMissing(["apps", "http", "servers", "nope"], 400), true);
  assert.equal(await config.isMissing(["apps", "http", "servers", "srv0"], 400), false);
  assert.equal(await config.isMissing(["apps", "http", "servers", "nope"], 500), false);
  // A key that holds no object cannot be a parent: a conflict, not a missing parent.
  await assert.rejects(
    config.update(["apps", "http", "grace_period", "x"], () => 1),
    (err: unknown) =>
      err instanceof CaddyApiError &&
      err.status === 409 &&
      /apps\.http\.grace_period .*not an object/.test(err.message),
  );
  assert.deepEqual(writes, []);
});

test("the managed server is created with its listen list and no routes, then only its listen list is written", async (t) => {
  const { config, writes, read } = await setup(t);
  const log = pino({ level: "silent" });
  const listen = [`127.0.0.1:${await freePort()}`];
  await prepareServer(config, { name: "srv1", listen, fields: [] }, log);
  assert.deepEqual(writes, ["PUT /config/apps/http/servers/srv1"]);
  assert.deepEqual(await read("/config/apps/http/servers/srv1"), { listen, routes: [] });

  writes.length = 0;
  await prepareServer(config, { name: "srv1", listen, fields: [] }, log);
  assert.deepEqual(writes, [], "in line: nothing written");
  const other = [`127.0.0.1:${await freePort()}`];
  await prepareServer(config, { name: "srv1", listen: other, fields: [] }, log);
  assert.deepEqual(writes, ["PATCH /config/apps/http/servers/srv1/listen"]);
  assert.deepEqual(await read("/config/apps/http/servers/srv1/listen"), other);
});
