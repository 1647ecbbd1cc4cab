/**
 * A dead peer is noticed by its silence (issue 37): a TCP relay between agent and control plane stops
 * forwarding without closing anything, as a lost route or a dead NAT mapping does; both sides notice within
 * three heartbeats, and the agent dials again and gets back in.
 */
import assert from "node:assert/strict";
import { createServer, connect as netConnect, type Socket } from "node:net";
import { test } from "node:test";
import { buildTestApp, type TestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { startControlPlane } from "../helpers/control-plane.js";
import { waitFor } from "../helpers/wait.js";

/** A TCP relay to `port` whose live connections can be frozen: nothing forwarded, nothing closed. */
async function relay(t: { after: (fn: () => unknown) => void }, port: number) {
  const pairs: [Socket, Socket][] = [];
  const server = createServer((client) => {
    const upstream = netConnect(port, "127.0.0.1");
    client.pipe(upstream);
    upstream.pipe(client);
    for (const s of [client, upstream]) s.on("error", () => {});
    pairs.push([client, upstream]);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(async () => {
    for (const p of pairs) for (const s of p) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    port: (server.address() as { port: number }).port,
    freeze() {
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
  };
}

const connection = async (app: TestApp) =>
  (await app.call({ method: "GET", url: "/v1/status" })).json().connect.connection as {
    state: string;
    last_error: { message: string } | null;
    reconnects: number;
  };

test("a peer gone silent is dead within three heartbeats on both sides; the agent dials again", async (t) => {
  const caddy = await startCaddy(t);
  const cp = await startControlPlane(t, { heartbeatMs: 1000, deadAfterMs: 3000 });
  const front = await relay(t, cp.port);
  const app = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    ...cp.agentEnv({
      HOSTKEEPER_CONNECT_URL: `wss://127.0.0.1:${front.port}/agents`,
      HOSTKEEPER_CONNECT_HEARTBEAT_S: "1",
    }),
  });
  const first = await cp.waitForAgent();
  // Idle past several heartbeats: the pings keep it up.
  await new Promise((r) => setTimeout(r, 3500));
  assert.equal((await connection(app)).state, "connected");
  assert.equal(first.open, true);

  const frozenAt = Date.now();
  front.freeze();
  const lost = await waitFor(
    "the agent to notice",
    async () => {
      const c = await connection(app);
      return c.last_error?.message.includes("silent") ? c : undefined;
    },
    10_000,
  );
  const agentNoticed = Date.now() - frozenAt;
  assert.match(lost.last_error?.message ?? "", /the control plane was silent for 3 s/);
  await first.closed;
  const cpNoticed = Date.now() - frozenAt;
  for (const ms of [agentNoticed, cpNoticed]) assert.ok(ms < 6000, `noticed after ${ms} ms`);

  // The relay forwards new connections: the agent is back, with its key alone.
  await waitFor("the agent back", async () =>
    (await connection(app)).state === "connected" ? true : undefined,
  );
  assert.ok((await connection(app)).reconnects >= 1);
  const again = [...cp.cp.agents.values()][0];
  assert.ok(again && again !== first);
  assert.equal((await again.fetch("/v1/proxy/routes")).status, 200);
});
