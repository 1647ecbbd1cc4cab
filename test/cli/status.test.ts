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
  test("a healthy agent whose Caddy answers: exit 0", async (t) => {
    const agent = await startCliAgent(t);
    const r = await runCli(["status"], agent.env);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(Object.keys(lines(r.stdout)), ["agent", "caddy", "operator", "versions"]);
    const s = lines(r.stdout);
    assert.equal(s.agent, `running at 127.0.0.1:${agent.port}, healthy`);
    assert.equal(s.caddy, "reachable, 0 routes");
    assert.match(s.operator ?? "", /^no running instance: 503 running_instance_unavailable: /);
    assert.equal(s.versions, `hostkeeper ${packageVersion()}, node ${process.version}`);
  });

  test("--json: each part with the API's status and body", async (t) => {
    const agent = await startCliAgent(t);
    const r = await runCli(["status", "--json"], agent.env);
    assert.equal(r.code, 0, r.stderr);
    const s = JSON.parse(r.stdout);
    assert.deepEqual(s.versions, { hostkeeper: packageVersion(), node: process.version });
    assert.deepEqual(s.agent, {
      address: `127.0.0.1:${agent.port}`,
      status: 200,
      body: { status: "ok" },
      error: null,
    });
    assert.deepEqual(s.caddy, { status: 200, body: [], error: null });
    assert.equal(s.operator.status, 503);
    assert.equal(s.operator.body.code, "running_instance_unavailable");
  });

  test("Caddy down: the agent's 503 is reported and the exit code is 1", async (t) => {
    const agent = await startCliAgent(t);
    await agent.caddy.stop();
    const r = await runCli(["status"], agent.env);
    assert.equal(r.code, 1);
    const s = lines(r.stdout);
    assert.equal(s.agent, `running at 127.0.0.1:${agent.port}, healthy`);
    assert.match(s.caddy ?? "", /^unavailable: 503 proxy_unavailable: /);
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
    assert.equal(s.caddy, "unknown: the agent is not reachable");
    assert.equal(s.versions, `hostkeeper ${packageVersion()}, node ${process.version}`);
  });

  test("--wait: an agent that starts listening during the wait is reported healthy", async (t) => {
    const caddy = await startCaddy(t);
    const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
    const port = await freePort();
    const env = { HOSTKEEPER_LISTEN: `127.0.0.1:${port}`, HOSTKEEPER_TOKEN: TEST_TOKEN };
    const running = runCli(["status", "--wait", "20"], env);
    await new Promise((r) => setTimeout(r, 1000));
    await h.app.listen({ host: "127.0.0.1", port });
    const r = await running;
    assert.equal(r.code, 0, r.stderr);
    assert.equal(lines(r.stdout).agent, `running at 127.0.0.1:${port}, healthy`);
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
