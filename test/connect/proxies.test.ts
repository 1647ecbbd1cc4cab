/**
 * The connection through what stands between a host and its control plane (issue 37): Caddy as a
 * TLS-terminating reverse proxy in front of the control plane, and an HTTP CONNECT proxy (`HTTPS_PROXY`).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { connect as netConnect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { freePort } from "../../support/loopback.js";
import { buildTestApp, type TestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { startControlPlane } from "../helpers/control-plane.js";
import { makeTestCa } from "../helpers/tls.js";
import { waitFor } from "../helpers/wait.js";

async function connection(app: TestApp): Promise<{ state: string; last_error: { message: string } | null }> {
  return (await app.call({ method: "GET", url: "/v1/status" })).json().connect.connection;
}

/** A Caddy serving TLS on a loopback port with the test CA's certificate, proxying everything to `upstream`. */
async function tlsFront(t: Parameters<typeof startCaddy>[0], upstream: number) {
  const dir = mkdtempSync(join(tmpdir(), "hk-front-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const ca = makeTestCa(dir);
  const port = await freePort();
  const caddy = await startCaddy(t, {
    withServer: false,
    extra: {
      apps: {
        http: {
          servers: {
            front: {
              listen: [`127.0.0.1:${port}`],
              automatic_https: { disable: true },
              tls_connection_policies: [{ default_sni: "127.0.0.1" }],
              routes: [
                { handle: [{ handler: "reverse_proxy", upstreams: [{ dial: `127.0.0.1:${upstream}` }] }] },
              ],
            },
          },
        },
        tls: { certificates: { load_pem: [{ certificate: ca.cert, key: ca.key }] } },
      },
    },
  });
  return { caddy, port, caFile: ca.caFile };
}

/** An agent that dials `cp` through a Caddy terminating TLS in front of it. */
async function agentBehindFront(
  t: Parameters<typeof startCaddy>[0],
  caddy: Awaited<ReturnType<typeof startCaddy>>,
  cp: Awaited<ReturnType<typeof startControlPlane>>,
): Promise<TestApp> {
  const front = await tlsFront(t, cp.port);
  return buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    ...cp.agentEnv({
      HOSTKEEPER_CONNECT_URL: `wss://127.0.0.1:${front.port}/agents`,
      HOSTKEEPER_CONNECT_CA: front.caFile,
    }),
  });
}

test("through Caddy terminating TLS in front of the control plane (behindTlsProxy)", async (t) => {
  const caddy = await startCaddy(t);
  const cp = await startControlPlane(t, { plain: true, behindTlsProxy: true });
  const app = await agentBehindFront(t, caddy, cp);
  const agent = await cp.waitForAgent();
  const res = await agent.fetch("/v1/proxy/routes");
  assert.equal(res.status, 200);
  assert.equal(await res.text(), (await app.call({ method: "GET", url: "/v1/proxy/routes" })).body);
  assert.equal((await connection(app)).state, "connected");
});

test("a TLS-terminating relay in front of a control plane that checks the binding is refused", async (t) => {
  const caddy = await startCaddy(t);
  const refusals: string[] = [];
  const cp = await startControlPlane(t, { plain: true, onRefused: (w) => refusals.push(w.code) });
  const app = await agentBehindFront(t, caddy, cp);
  await waitFor("a refusal", async () => ((await connection(app)).last_error ? true : undefined));
  assert.match((await connection(app)).last_error?.message ?? "", /TLS channel is not this one/);
  assert.deepEqual([...new Set(refusals)], ["binding_mismatch"]);
  assert.equal(cp.enrollment.enrolled.size, 0);
});

/** An HTTP CONNECT proxy on loopback that records the targets it tunnelled to. */
async function connectProxy(t: { after: (fn: () => unknown) => void }) {
  const tunnels: string[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((_req, res) => res.writeHead(405).end());
  server.on("connect", (req, client: Socket, head: Buffer) => {
    tunnels.push(String(req.url));
    const [host, port] = String(req.url).split(":");
    const upstream = netConnect(Number(port), host ?? "", () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => sockets.delete(s));
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, tunnels };
}

test("through an HTTP CONNECT proxy (HTTPS_PROXY), TLS end to end", async (t) => {
  const caddy = await startCaddy(t);
  const cp = await startControlPlane(t);
  const proxy = await connectProxy(t);
  const saved = { HTTPS_PROXY: process.env.HTTPS_PROXY, NO_PROXY: process.env.NO_PROXY };
  process.env.HTTPS_PROXY = proxy.url;
  delete process.env.NO_PROXY;
  t.after(() => {
    for (const [k, v] of Object.entries(saved))
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
  });
  const app = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, ...cp.agentEnv() });
  const agent = await cp.waitForAgent();
  assert.deepEqual(proxy.tunnels, [`127.0.0.1:${cp.port}`]);
  const res = await agent.fetch("/v1/proxy/routes");
  assert.equal(res.status, 200);
  assert.equal(await res.text(), (await app.call({ method: "GET", url: "/v1/proxy/routes" })).body);
});
