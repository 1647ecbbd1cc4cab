/**
 * `HOSTKEEPER_LISTEN=off` (issue 37): the agent, a real `hostkeeper serve` with its embedded Caddy, listens on
 * nothing; the only listening sockets are its Caddy's (read from /proc/net/tcp and tcp6, each socket's
 * owner found through /proc/<pid>/fd). The control plane reaches the API, health and metrics over the
 * connection; the CLI says why it cannot reach the agent.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { freePort } from "../../support/loopback.js";
import { runCli } from "../cli/support.js";
import { startControlPlane } from "../helpers/control-plane.js";
import { caddyPid, killEmbeddedCaddys, spawnAgent } from "../helpers/serve.js";

/** Inodes of the TCP sockets in LISTEN state (state 0A), IPv4 and IPv6, with their local port. */
function listeningSockets(): Map<string, number> {
  const out = new Map<string, number>();
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    for (const line of readFileSync(file, "utf8").trim().split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[3] !== "0A") continue;
      out.set(f[9] as string, Number.parseInt((f[1] as string).split(":")[1] as string, 16));
    }
  }
  return out;
}

/** The socket inodes a process holds open. */
function socketsOf(pid: number): Set<string> {
  const out = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) out.add(m[1] as string);
    } catch {
      // closed meanwhile
    }
  }
  return out;
}

test("with HOSTKEEPER_LISTEN=off the agent listens on nothing, and is reached over its connection", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "hk-listen-off-"));
  t.after(async () => {
    await killEmbeddedCaddys(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
  });
  const cp = await startControlPlane(t);
  const caddyPort = await freePort();
  const env = {
    HOSTKEEPER_DATA_DIR: dataDir,
    HOSTKEEPER_LISTEN: "off",
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${caddyPort}`,
    HOSTKEEPER_TLS_ISSUER: "off",
    ...cp.agentEnv(),
  };
  const agent = spawnAgent(env, 0);
  t.after(async () => {
    if (agent.child.exitCode === null && agent.child.signalCode === null) {
      process.kill(agent.child.pid as number, "SIGKILL");
      await agent.exited;
    }
  });
  await agent.waitForLog("API off (reached through the connection to the control plane only)", 30_000);
  const connected = await cp.waitForAgent();
  assert.equal((await connected.fetch("/healthz")).status, 200);
  assert.equal((await connected.fetch("/readyz")).status, 200);
  const metrics = await (await connected.fetch("/metrics")).text();
  assert.match(metrics, /^hostkeeper_connect_connected 1$/m);
  const created = await connected.fetch("/v1/proxy/routes", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ domain: "off.test", upstreams: [{ dial: "127.0.0.1:9" }] }),
  });
  assert.equal(created.status, 201, await created.text());

  const listening = listeningSockets();
  const agentPid = agent.child.pid as number;
  const mine = [...socketsOf(agentPid)].filter((inode) => listening.has(inode));
  assert.deepEqual(mine, [], "the agent holds no listening socket");
  const caddy = caddyPid(dataDir);
  assert.ok(caddy, "the embedded Caddy runs");
  const caddysPorts = [...socketsOf(caddy)].filter((i) => listening.has(i)).map((i) => listening.get(i));
  assert.ok(caddysPorts.includes(caddyPort), `Caddy listens on ${caddyPort}: ${caddysPorts.join(", ")}`);

  const cli = await runCli(["status"], env);
  assert.equal(cli.code, 1);
  assert.match(cli.stderr, /listens on nothing \(HOSTKEEPER_LISTEN=off\)/);
});
