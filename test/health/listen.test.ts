import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:net";
import { describe, test } from "node:test";
import { HTTPS_REDIRECT_ID } from "../../src/proxy/route/https-redirect.js";
import { freePort } from "../../support/loopback.js";
import { startCaddy } from "../helpers/caddy.js";
import { viaProxy } from "../helpers/http.js";
import {
  alive,
  caddyPid,
  embeddedCaddyPids,
  killEmbeddedCaddys,
  request,
  spawnAgent,
  startAgent,
  stopAgent,
} from "../helpers/serve.js";
import { waitFor } from "../helpers/wait.js";
import { agentStatus, embeddedEnv, readyz, TOKEN } from "./support.js";

/** Runs `hostkeeper serve` expecting it to refuse to start; resolves with its exit code and output. */
async function refusedStart(t: { after: (fn: () => unknown) => void }, env: Record<string, string>) {
  const agent = spawnAgent(env, await freePort());
  t.after(async () => {
    if (agent.child.exitCode === null && agent.child.signalCode === null) {
      process.kill(agent.child.pid as number, "SIGKILL");
      await agent.exited;
    }
    if (env.HOSTKEEPER_DATA_DIR) await killEmbeddedCaddys(env.HOSTKEEPER_DATA_DIR);
  });
  const code = await Promise.race([
    agent.exited,
    new Promise<"running">((r) => setTimeout(() => r("running"), 20_000).unref()),
  ]);
  return { code, output: agent.log() };
}

describe("the managed server's listen addresses", () => {
  test("exist from the start: the server listens before any route is made", async (t) => {
    const { env, httpPort } = await embeddedEnv(t);
    const agent = await startAgent(t, env);
    const r = await readyz(agent.port);
    assert.equal(r.status, 200);
    assert.equal(r.body.checks.listeners.detail, `bound: 127.0.0.1:${httpPort}`);
    // No route of the API's: only the agent's redirect to HTTPS (the embedded Caddy's issuer is acme), put
    // in place by the start's conformance, which runs beside the first requests.
    const ids = async () =>
      (
        JSON.parse((await request(agent.port, "GET", "/v1/proxy/routes", TOKEN)).body) as { "@id": string }[]
      ).map((r) => r["@id"]);
    await waitFor("the redirect route", async () => ((await ids()).length === 1 ? true : undefined));
    assert.deepEqual(await ids(), [HTTPS_REDIRECT_ID]);
    assert.equal((await agentStatus(agent.port)).routes.count, 1);
    assert.equal((await viaProxy(httpPort, "nothing.test")).status, 308, "Caddy answers: the redirect");
  });

  test("held by a plain server: the start stops with a message naming the address and its holder", async (t) => {
    const { env, dataDir, httpPort } = await embeddedEnv(t);
    const holder = createServer();
    holder.listen(httpPort, "127.0.0.1");
    await once(holder, "listening");
    t.after(() => holder.close());
    const { code, output } = await refusedStart(t, env);
    assert.equal(code, 1, output);
    const line = output.trim().split("\n").at(-1) ?? "";
    assert.match(line, /^hostkeeper: Caddy listen address \(HOSTKEEPER_CADDY_LISTEN\): /);
    assert.ok(line.includes(`127.0.0.1:${httpPort} is already in use by pid ${process.pid}`), line);
    assert.deepEqual(embeddedCaddyPids(dataDir), [], "no Caddy was started");
  });

  test("shared through SO_REUSEPORT by another Caddy: the start stops too, naming it", async (t) => {
    const { env, dataDir, httpPort } = await embeddedEnv(t);
    // A real Caddy on the address: Caddy sets SO_REUSEPORT, so a second Caddy would bind beside it silently.
    const other = await startCaddy(t, { httpPort });
    const { code, output } = await refusedStart(t, env);
    assert.equal(code, 1, output);
    const line = output.trim().split("\n").at(-1) ?? "";
    assert.ok(line.includes(`127.0.0.1:${httpPort} is already in use by pid ${other.pid} (caddy)`), line);
    assert.ok(line.includes("SO_REUSEPORT"), line);
    assert.deepEqual(embeddedCaddyPids(dataDir), [], "no Caddy was started");
  });

  test("joined through SO_REUSEPORT while the agent was away: adopting its Caddy, the agent refuses to start", async (t) => {
    const { env, dataDir, httpPort } = await embeddedEnv(t);
    const first = await startAgent(t, env);
    assert.equal(await stopAgent(first), 0);
    const ours = caddyPid(dataDir) as number;
    // Binds beside our Caddy without an error: both set SO_REUSEPORT.
    const intruder = await startCaddy(t, { httpPort });
    const { code, output } = await refusedStart(t, env);
    assert.equal(code, 1, output);
    const line = output.trim().split("\n").at(-1) ?? "";
    assert.ok(
      line.includes(`127.0.0.1:${httpPort} is also held by pid ${intruder.pid} (caddy)`) &&
        line.includes(`with the embedded Caddy (pid ${ours}) through SO_REUSEPORT`),
      line,
    );
    assert.ok(alive(ours), "the adopted Caddy was running before the agent; it is left running");
  });
});
