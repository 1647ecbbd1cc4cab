/**
 * The agent's connection to its control plane (issue 37), against the control plane's library over real TLS
 * on loopback: enrollment, pinning, the handshake's binding, requests through the agent's own router.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { startControlPlane } from "../helpers/control-plane.js";

test("an agent enrolls with its token, and the control plane calls its API over the connection", async (t) => {
  const caddy = await startCaddy(t);
  const cp = await startControlPlane(t);
  const agentApp = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, ...cp.agentEnv() });
  const agent = await cp.waitForAgent();
  const res = await agent.fetch("/v1/status");
  assert.equal(res.status, 200);
  const status = (await res.json()) as {
    connect: { fingerprint: string; connection: { state: string; control_plane: string } };
  };
  assert.equal(status.connect.fingerprint, agent.fingerprint);
  assert.equal(status.connect.connection.state, "connected");
  assert.equal(status.connect.connection.control_plane, cp.cp.fingerprint);
  const routes = await agent.fetch("/v1/proxy/routes");
  assert.equal(routes.status, 200);
  const overHttp = await agentApp.call({ method: "GET", url: "/v1/proxy/routes" });
  assert.equal(await routes.text(), overHttp.body);
});
