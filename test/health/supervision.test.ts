import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { HTTPS_REDIRECT_ID } from "../../src/proxy/route/https-redirect.js";
import { sleep } from "../../src/util/timers.js";
import { startUpstream } from "../helpers/http.js";
import { alive, caddyPid, request, startAgent, stopAgent } from "../helpers/serve.js";
import { waitFor } from "../helpers/wait.js";
import { parseExposition, value } from "../metrics/support.js";
import { agentStatus, embeddedEnv, readyz, TOKEN } from "./support.js";

/**
 * Kills the embedded Caddy by its PID and waits until the agent has another one ready; returns both PIDs
 * and, with `seeDown`, the 503 readyz answered in between (the window is the restart delay and Caddy's start).
 */
async function killAndWaitForReturn(
  agent: { port: number; log: () => string },
  dataDir: string,
  seeDown = true,
) {
  const port = agent.port;
  const before = caddyPid(dataDir);
  assert.ok(before !== undefined && alive(before), "a Caddy runs");
  let lastReadyz = "nothing";
  const killedAt = Date.now();
  process.kill(before, "SIGKILL");
  const notReady = seeDown
    ? await waitFor(
        "readyz to say 503",
        async () => {
          const r = await readyz(port);
          return r.status === 503 ? r : undefined;
        },
        5_000,
      )
    : undefined;
  await waitFor(
    "readyz to say 200 again",
    async () => {
      const r = await readyz(port);
      lastReadyz = JSON.stringify(r);
      return r.status === 200 ? true : undefined;
    },
    20_000,
  ).catch((err: Error) => {
    // What the supervisor did meanwhile is in the agent's log.
    throw new Error(
      `${err.message}; readyz last said: ${lastReadyz}\nagent log:\n${agent.log().slice(-4_000)}`,
    );
  });
  const downMs = Date.now() - killedAt;
  // Caddy may answer /readyz a moment before the agent's own wait for it has seen it answer.
  const after = await waitFor(
    "the agent to see the new Caddy running",
    async () => {
      const s = await agentStatus(port);
      return s.caddy.state === "running" && s.caddy.pid !== null ? (s.caddy.pid as number) : undefined;
    },
    5_000,
  );
  assert.ok(
    after !== before && after === caddyPid(dataDir) && alive(after),
    `a new Caddy runs (was ${before})`,
  );
  return { before, after, notReady, downMs };
}

const routeIds = async (port: number) =>
  (JSON.parse((await request(port, "GET", "/v1/proxy/routes", TOKEN)).body) as { "@id": string }[]).map(
    (r) => r["@id"],
  );

describe("the embedded Caddy is supervised", () => {
  test("a killed Caddy comes back with its routes; readyz answers 503 meanwhile, then 200", async (t) => {
    const { env, dataDir } = await embeddedEnv(t);
    const agent = await startAgent(t, env);
    const up = await startUpstream(t, "upstream");
    const created = await request(agent.port, "POST", "/v1/proxy/routes", TOKEN, {
      domain: "back.test",
      upstreams: [{ dial: `127.0.0.1:${up.port}` }],
    });
    assert.equal(created.status, 201, created.body);
    const ready = await readyz(agent.port);
    assert.equal(ready.status, 200);
    assert.equal(ready.body.status, "ready");

    const { after, notReady } = await killAndWaitForReturn(agent, dataDir);
    assert.ok(notReady);
    assert.equal(notReady.body.status, "not_ready");
    assert.equal(notReady.body.checks.database.status, "ok");
    assert.equal(notReady.body.checks.caddy_admin.status, "failing");
    assert.equal(notReady.body.checks.listeners.status, "failing");

    // Read from the new Caddy: `--resume` loaded the autosaved config. Its listener is bound (readyz).
    // The agent's HTTPS redirect (the embedded Caddy's issuer is acme) comes back first.
    assert.deepEqual(await routeIds(agent.port), [HTTPS_REDIRECT_ID, "back.test"]);
    await agent.waitForLog("was killed by SIGKILL; starting it again in 300 ms", 5_000);
    const s = await agentStatus(agent.port);
    assert.equal(s.caddy.state, "running");
    assert.equal(s.caddy.pid, after);
    assert.equal(s.caddy.restarts, 1);
    assert.equal(s.caddy.adopted, false);
    assert.ok(Date.parse(s.caddy.last_exit_at) <= Date.parse(s.caddy.last_restart_at));
    assert.equal(s.routes.count, 2);
    const metrics = await request(agent.port, "GET", "/metrics", TOKEN);
    assert.equal(metrics.status, 200, metrics.body);
    assert.equal(value(parseExposition(metrics.body).samples, "hostkeeper_caddy_restarts_total"), 1);
  });

  test("an adopted Caddy, found running at start, is watched by its PID and started again", async (t) => {
    const { env, dataDir } = await embeddedEnv(t);
    const first = await startAgent(t, env);
    const up = await startUpstream(t, "upstream");
    const created = await request(first.port, "POST", "/v1/proxy/routes", TOKEN, {
      domain: "adopted.test",
      upstreams: [{ dial: `127.0.0.1:${up.port}` }],
    });
    assert.equal(created.status, 201, created.body);
    assert.equal(await stopAgent(first), 0);
    const running = caddyPid(dataDir);
    assert.ok(running !== undefined && alive(running), "Caddy outlives the agent");

    const agent = await startAgent(t, env);
    let s = await agentStatus(agent.port);
    assert.equal(s.caddy.adopted, true);
    assert.equal(s.caddy.pid, running, agent.log());

    const { after } = await killAndWaitForReturn(agent, dataDir);
    await agent.waitForLog(`the embedded Caddy (pid ${running}) is gone; starting it again`, 5_000);
    s = await agentStatus(agent.port);
    assert.equal(s.caddy.pid, after);
    assert.equal(s.caddy.adopted, false, "the new Caddy is the agent's own child");
    assert.equal(s.caddy.restarts, 1);
    assert.deepEqual(await routeIds(agent.port), [HTTPS_REDIRECT_ID, "adopted.test"]);
  });

  test("exits in a row are restarted after doubling delays, which start over once Caddy stays up", async (t) => {
    const base = 100;
    const { env, dataDir } = await embeddedEnv(t, { HOSTKEEPER_CADDY_RESTART_BACKOFF_MS: String(base) });
    const agent = await startAgent(t, env);
    const delays = [base, 2 * base, 4 * base, 8 * base];
    for (const [i, delay] of delays.entries()) {
      const { downMs } = await killAndWaitForReturn(agent, dataDir, false);
      assert.ok(downMs >= delay, `exit ${i + 1}: back after ${downMs} ms, before its delay of ${delay} ms`);
      const said = agent.log().match(/starting it again in (\d+) ms/g) ?? [];
      assert.deepEqual(
        said.map((l) => Number(/(\d+) ms/.exec(l)?.[1])),
        delays.slice(0, i + 1),
      );
    }
    // Up for 64 times the base delay: the next exit is not one in a row. A wait for time itself, not for
    // something to not happen: the agent took this Caddy's start time before the test saw it running (the
    // last killAndWaitForReturn), so this long from now is enough.
    await sleep(64 * base);
    await killAndWaitForReturn(agent, dataDir, false);
    const said = agent.log().match(/starting it again in (\d+) ms/g) ?? [];
    assert.equal(said.at(-1), `starting it again in ${base} ms`);
    assert.equal((await agentStatus(agent.port)).caddy.restarts, 5);
  });
});
