import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { packageVersion } from "../../src/paths.js";
import { freePort } from "../../support/loopback.js";
import { buildTestApp, TEST_TOKEN } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { runCli, startCliAgent } from "./support.js";

const lines = (text: string) =>
  Object.fromEntries(
    text
      .trimEnd()
      .split("\n")
      .map((l) => l.split(/ {2,}/)),
  );

describe("status", () => {
  test("a ready agent: GET /v1/status in lines, exit 0", async (t) => {
    const agent = await startCliAgent(t);
    const r = await runCli(["status"], agent.env);
    assert.equal(r.code, 0, r.stderr);
    const s = lines(r.stdout);
    assert.deepEqual(Object.keys(s), [
      "agent",
      "caddy",
      "outbox",
      "updates",
      "patches",
      "operator",
      "self-update",
      "connection",
      "versions",
    ]);
    assert.match(
      s.agent ?? "",
      new RegExp(`^running at 127\\.0\\.0\\.1:${agent.port}, up (\\d+[dhms] ?)+, ready$`),
    );
    assert.equal(s.caddy, "external, running, 0 routes");
    assert.equal(s.outbox, "0 pending, 0 dead");
    assert.match(s.updates ?? "", /^(apt|dnf|none)( \S+)?, never checked$/);
    assert.equal(s.patches, "never checked");
    assert.equal(s.operator, "none installed");
    assert.equal(s["self-update"], "none");
    assert.equal(s.connection, "none");
    assert.equal(s.versions, `hostkeeper ${packageVersion()}, node ${process.version}`);
  });

  test("--json: the API's status body as it came", async (t) => {
    const agent = await startCliAgent(t);
    const r = await runCli(["status", "--json"], agent.env);
    assert.equal(r.code, 0, r.stderr);
    const s = JSON.parse(r.stdout);
    assert.deepEqual(s.versions, { hostkeeper: packageVersion(), node: process.version });
    assert.deepEqual(s.agent, { address: `127.0.0.1:${agent.port}` });
    assert.equal(s.status.status, 200);
    assert.equal(s.status.error, null);
    assert.deepEqual(Object.keys(s.status.body).sort(), [
      "agent_update",
      "boot",
      "caddy",
      "connect",
      "operator",
      "outbox",
      "readiness",
      "routes",
      "started_at",
      "updates",
      "uptime_seconds",
      "versions",
    ]);
    assert.equal(s.status.body.caddy.mode, "external");
    assert.equal(s.status.body.readiness.status, "ready");
    assert.equal(s.readiness, null, "/readyz is asked only when the status cannot be had");
  });

  test("Caddy down: not ready, the failing checks named, exit 1", async (t) => {
    const agent = await startCliAgent(t);
    await agent.caddy.stop();
    const r = await runCli(["status"], agent.env);
    assert.equal(r.code, 1);
    const s = lines(r.stdout);
    assert.match(
      s.agent ?? "",
      /, not ready: caddy_admin: Caddy's admin API is unreachable: ECONNREFUSED; listeners: /,
    );
    assert.equal(s.caddy, "external, unreachable, routes unknown");
  });

  test("without a readable token: readiness from GET /readyz, the status said to be unknown", async (t) => {
    const agent = await startCliAgent(t);
    const { HOSTKEEPER_TOKEN: _, ...env } = agent.env;
    const r = await runCli(["status"], env);
    assert.equal(r.code, 0, r.stderr);
    const s = lines(r.stdout);
    assert.equal(s.agent, `running at 127.0.0.1:${agent.port}, ready`);
    assert.match(s.status ?? "", /^unknown: no token in .*\/token: the agent writes it at its first start/);

    const wrong = await runCli(["status"], { ...agent.env, HOSTKEEPER_TOKEN: "x".repeat(16) });
    assert.equal(wrong.code, 0, wrong.stderr);
    assert.match(lines(wrong.stdout).status ?? "", /^unknown: 401 unauthorized: /);
  });

  test("the agent down: said in the report, exit 1, versions still shown", async () => {
    const port = await freePort();
    const r = await runCli(["status"], {
      HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
      HOSTKEEPER_TOKEN: "x".repeat(16),
    });
    assert.equal(r.code, 1);
    const s = lines(r.stdout);
    assert.equal(s.agent, `the agent is not running at 127.0.0.1:${port} (connection refused)`);
    assert.equal(s.status, "unknown: the agent is not reachable");
    assert.equal(s.versions, `hostkeeper ${packageVersion()}, node ${process.version}`);
  });

  test("--wait: an agent that starts listening during the wait is reported ready", async (t) => {
    const caddy = await startCaddy(t);
    const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
    const port = await freePort();
    const env = { HOSTKEEPER_LISTEN: `127.0.0.1:${port}`, HOSTKEEPER_TOKEN: TEST_TOKEN };
    const running = runCli(["status", "--wait", "20"], env);
    await new Promise((r) => setTimeout(r, 1000));
    await h.app.listen({ host: "127.0.0.1", port });
    const r = await running;
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      lines(r.stdout).agent ?? "",
      new RegExp(`^running at 127\\.0\\.0\\.1:${port}, up .*, ready$`),
    );
  });

  test("--wait: an agent that never comes is reported down once the wait is over", async () => {
    const port = await freePort();
    const started = Date.now();
    const r = await runCli(["status", "--wait", "0.5"], {
      HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
      HOSTKEEPER_TOKEN: "x".repeat(16),
    });
    assert.equal(r.code, 1);
    assert.ok(Date.now() - started >= 500);
    assert.equal(lines(r.stdout).agent, `the agent is not running at 127.0.0.1:${port} (connection refused)`);
  });

  test("the agent down, for a command that needs it: one line, exit 1", async () => {
    const port = await freePort();
    const r = await runCli(["routes", "list"], {
      HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
      HOSTKEEPER_TOKEN: "x".repeat(16),
    });
    assert.equal(r.code, 1);
    assert.equal(r.stdout, "");
    assert.equal(
      r.stderr,
      `hostkeeper: the agent is not running at 127.0.0.1:${port} (connection refused)\n`,
    );
  });

  test("an agent that does not answer: the request's time-out ends the command", async (t) => {
    const silent = http.createServer(() => {
      // never answers
    });
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    t.after(() => {
      silent.closeAllConnections();
      silent.close();
    });
    const port = (silent.address() as AddressInfo).port;
    const started = Date.now();
    const r = await runCli(["routes", "list", "--timeout", "0.5"], {
      HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
      HOSTKEEPER_TOKEN: "x".repeat(16),
    });
    assert.equal(r.code, 1);
    assert.equal(
      r.stderr,
      `hostkeeper: the agent at 127.0.0.1:${port} did not answer GET /v1/proxy/routes within 0.5 s (see --timeout)\n`,
    );
    assert.ok(Date.now() - started < 5000);
  });
});
