import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { goMemLimitOf } from "../src/caddy/process/memory-limit.js";
import { HTTPS_REDIRECT_ID } from "../src/proxy/route/https-redirect.js";
import { freePort } from "../support/loopback.js";
import { startReceiver, startUpstream } from "./helpers/http.js";
import { alive, killEmbeddedCaddys, request, startAgent } from "./helpers/serve.js";
import { waitFor } from "./helpers/wait.js";

test("embedded defaults: generated token, own Caddy that outlives the agent, routes that survive restarts, graceful stop", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "hk-server-"));
  const httpPort = await freePort();
  const env = {
    HOSTKEEPER_DATA_DIR: dataDir,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${httpPort}`,
    // The request in flight at SIGTERM waits for its callback's answer for as long as the test holds it.
    HOSTKEEPER_WEBHOOK_FIRST_ATTEMPT_TIMEOUT_MS: "30000",
    HOSTKEEPER_CADDY_MEMORY_LIMIT_MB: "300",
    HOSTKEEPER_CADDY_ENV_FILE: join(dataDir, "caddy.env"),
  };
  const pidFile = join(dataDir, "caddy", "caddy.pid");
  t.after(async () => {
    await killEmbeddedCaddys(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
  });

  let agent = await startAgent(t, env);
  const tokenPath = join(dataDir, "token");
  const token = readFileSync(tokenPath, "utf8").trim();
  assert.equal(statSync(tokenPath).mode & 0o777, 0o600);
  await agent.waitForLog(tokenPath, 10_000); // the log names the token file
  assert.ok(!agent.log().includes(token), "the log never shows the token");
  assert.equal((await request(agent.port, "GET", "/v1/proxy/routes")).status, 401);

  const up = await startUpstream(t, "u");
  const created = await request(agent.port, "POST", "/v1/proxy/routes", token, {
    domain: "embedded.test",
    upstreams: [{ dial: `127.0.0.1:${up.port}` }],
  });
  assert.equal(created.status, 201, created.body);
  const caddyPid = Number(readFileSync(pidFile, "utf8"));
  assert.ok(alive(caddyPid));
  // The memory setting reaches Caddy's environment, and the file a Caddy the agent does not start reads.
  assert.equal(goMemLimitOf(caddyPid), "300MiB");
  assert.match(readFileSync(env.HOSTKEEPER_CADDY_ENV_FILE, "utf8"), /^GOMEMLIMIT=300MiB$/m);

  // SIGTERM while a request is in flight: the request waits for its callback's first attempt, which the
  // receiver answers only once the agent has begun to shut down. The request completes all the same.
  let release = () => {};
  const shuttingDown = new Promise<void>((r) => {
    release = r;
  });
  t.after(() => release());
  const slow = await startReceiver(t, { hold: () => shuttingDown });
  const inflight = request(agent.port, "POST", "/v1/proxy/routes", token, {
    domain: "inflight.test",
    upstreams: [{ dial: `127.0.0.1:${up.port}` }],
    callback_url: slow.url,
  });
  await slow.waitFor(1, 10_000);
  process.kill(agent.child.pid as number, "SIGTERM");
  await agent.waitForLog("shutting down", 10_000);
  release();
  assert.equal((await inflight).status, 201);
  assert.equal(await agent.exited, 0);
  assert.ok(alive(caddyPid), "Caddy keeps running when the agent stops");

  // Restart: the running Caddy is adopted. It keeps the memory limit it started with, and the log says so.
  env.HOSTKEEPER_CADDY_MEMORY_LIMIT_MB = "400";
  agent = await startAgent(t, env);
  await agent.waitForLog("another memory limit than HOSTKEEPER_CADDY_MEMORY_LIMIT_MB", 10_000);
  assert.equal(goMemLimitOf(caddyPid), "300MiB");
  assert.match(readFileSync(env.HOSTKEEPER_CADDY_ENV_FILE, "utf8"), /^GOMEMLIMIT=400MiB$/m);
  let ids = JSON.parse((await request(agent.port, "GET", "/v1/proxy/routes", token)).body).map(
    (r: { "@id": string }) => r["@id"],
  );
  assert.deepEqual(ids.sort(), ["embedded.test", HTTPS_REDIRECT_ID, "inflight.test"]);
  process.kill(agent.child.pid as number, "SIGTERM");
  await agent.exited;

  // Caddy gone too: the next start resumes Caddy's autosaved config, so the routes come back.
  process.kill(caddyPid, "SIGKILL");
  await waitFor("the killed Caddy to be gone", () => (alive(caddyPid) ? undefined : true), 10_000);
  agent = await startAgent(t, env);
  ids = JSON.parse((await request(agent.port, "GET", "/v1/proxy/routes", token)).body).map(
    (r: { "@id": string }) => r["@id"],
  );
  assert.deepEqual(ids.sort(), ["embedded.test", HTTPS_REDIRECT_ID, "inflight.test"]);
  assert.notEqual(Number(readFileSync(pidFile, "utf8")), caddyPid);
  assert.equal(goMemLimitOf(Number(readFileSync(pidFile, "utf8"))), "400MiB");
  process.kill(agent.child.pid as number, "SIGTERM");
  assert.equal(await agent.exited, 0);
});

test("with HOSTKEEPER_CADDY_ADMIN set and unreachable, the agent starts no Caddy and answers 503 for routes only", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "hk-server-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const dead = await freePort();
  const token = "server-test-token-0123456789";
  const agent = await startAgent(t, {
    HOSTKEEPER_DATA_DIR: dataDir,
    HOSTKEEPER_CADDY_ADMIN: `http://127.0.0.1:${dead}`,
    HOSTKEEPER_TOKEN: token,
  });
  assert.equal((await request(agent.port, "GET", "/v1/proxy/routes", token)).status, 503);
  assert.equal((await request(agent.port, "GET", "/v1/openapi.json", token)).status, 200);
  assert.equal(existsSync(join(dataDir, "caddy")), false);
  process.kill(agent.child.pid as number, "SIGTERM");
  assert.equal(await agent.exited, 0);
});
