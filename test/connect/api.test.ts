/**
 * The agent's API over the connection answers as over HTTP (issue 37): every area's reads, byte for byte;
 * changes made over the connection answer as the same change over HTTP; 500 requests at once on one
 * connection; a 20,000-route list streamed through the flow control; a body past the agent's limit refused.
 */
import assert from "node:assert/strict";
import { getEventListeners } from "node:events";
import { test } from "node:test";
import type { ConnectedAgent } from "../../src/connect/control-plane/index.js";
import { buildRoute } from "../../src/proxy/route/build-route.js";
import { buildTestApp, type TestApp } from "../helpers/app.js";
import { startCaddy, type TestCaddy } from "../helpers/caddy.js";
import { startControlPlane } from "../helpers/control-plane.js";

interface Answer {
  status: number;
  type: string | undefined;
  body: string;
}

async function overConnection(agent: ConnectedAgent, method: string, path: string, payload?: unknown) {
  const res = await agent.fetch(path, {
    method,
    ...(payload === undefined
      ? {}
      : { body: JSON.stringify(payload), headers: { "content-type": "application/json" } }),
  });
  return { status: res.status, type: res.headers.get("content-type") ?? undefined, body: await res.text() };
}

async function overHttp(app: TestApp, method: string, url: string, payload?: unknown): Promise<Answer> {
  const res = await app.call({ method, url, ...(payload === undefined ? {} : { payload }) });
  return { status: res.statusCode, type: res.headers["content-type"] as string | undefined, body: res.body };
}

async function setup(t: Parameters<typeof startCaddy>[0]) {
  const caddy = await startCaddy(t);
  const cp = await startControlPlane(t);
  const app = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, ...cp.agentEnv() });
  return { caddy, cp, app, agent: await cp.waitForAgent() };
}

/** Reads whose answers move between two requests, by nature: compared by status and type only. */
const MOVING: Record<string, string> = {
  "/v1/status": "the connection's own frame and byte counts",
  "/metrics": "counters of the requests themselves",
  "/readyz": "the time each check took",
};

test("every read of every area answers over the connection as over HTTP, byte for byte", async (t) => {
  const { app, agent, caddy } = await setup(t);
  await seedRoutes(caddy, 3);
  const reads = app.app
    .registeredRoutes()
    .filter((r) => r.method === "GET" && !r.url.includes(":"))
    .map((r) => r.url);
  // At least the areas of the contract, so a change to the route table cannot empty this test.
  for (const area of [
    "/v1/proxy/routes",
    "/v1/system/apply-history",
    "/v1/operator/running-instance",
    "/v1/events",
    "/v1/audit",
    "/v1/status",
  ])
    assert.ok(reads.includes(area), `${area} among ${reads.join(", ")}`);
  reads.push(
    "/v1/proxy/routes/r1.test",
    "/v1/proxy/routes/nope.test",
    "/v1/agent/update/nope",
    "/v1/nothing-here",
  );
  for (const path of reads) {
    const viaConnection = await overConnection(agent, "GET", path);
    const viaHttp = await overHttp(app, "GET", path);
    if (path in MOVING) {
      assert.deepEqual(
        { status: viaConnection.status, type: viaConnection.type },
        { status: viaHttp.status, type: viaHttp.type },
        path,
      );
      continue;
    }
    assert.deepEqual(viaConnection, viaHttp, path);
  }
});

test("HEAD over the connection answers as over HTTP, without a body", async (t) => {
  const { app, agent, caddy } = await setup(t);
  await seedRoutes(caddy, 2);
  for (const path of [
    "/healthz",
    "/v1/proxy/routes/r1.test",
    "/v1/proxy/routes",
    "/v1/proxy/routes/nope.test",
  ]) {
    const viaConnection = await overConnection(agent, "HEAD", path);
    const viaHttp = await overHttp(app, "HEAD", path);
    assert.deepEqual(viaConnection, viaHttp, path);
    assert.equal(viaConnection.body, "");
  }
});

test("changes over the connection answer as the same changes over HTTP", async (t) => {
  const { app, agent } = await setup(t);
  const route = { domain: "same.test", upstreams: [{ dial: "127.0.0.1:9" }] };
  // Each change made over the connection, undone over HTTP, then made again over HTTP: the same answer.
  const changes: [string, string, unknown][] = [
    ["POST", "/v1/proxy/routes", route],
    ["POST", "/v1/proxy/routes", { domain: "bad domain" }],
    ["POST", "/v1/agent/update", { version: "9.9.9" }],
    ["POST", "/v1/operator/update", { version: "1.2.3" }],
    ["POST", "/v1/tokens/own/rotate", {}],
    ["PUT", "/v1/system/schedule", { nonsense: true }],
  ];
  for (const [method, path, payload] of changes) {
    const viaConnection = await overConnection(agent, method, path, payload);
    await app.call({ method: "DELETE", url: "/v1/proxy/routes/same.test" });
    const viaHttp = await overHttp(app, method, path, payload);
    await app.call({ method: "DELETE", url: "/v1/proxy/routes/same.test" });
    assert.deepEqual(viaConnection, viaHttp, `${method} ${path}`);
  }
  assert.equal((await overConnection(agent, "POST", "/v1/proxy/routes", route)).status, 201);
  const deleted = await overConnection(agent, "DELETE", "/v1/proxy/routes/same.test");
  assert.equal(deleted.status, 204, deleted.body);
  assert.equal((await overHttp(app, "GET", "/v1/proxy/routes/same.test")).status, 404);
});

test("500 requests at once on one connection, each answered with its own", async (t) => {
  const { agent, caddy } = await setup(t);
  await seedRoutes(caddy, 50);
  const answers = await Promise.all(
    Array.from({ length: 500 }, async (_, i) => {
      const id = `r${i % 50}.test`;
      const res = await agent.fetch(`/v1/proxy/routes/${id}`);
      return { id, status: res.status, got: ((await res.json()) as { "@id": string })["@id"] };
    }),
  );
  for (const a of answers) assert.deepEqual({ status: a.status, got: a.got }, { status: 200, got: a.id });
  assert.equal(agent.inFlight, 0);
});

test("a 20,000-route list streams over the connection, the same bytes as over HTTP", async (t) => {
  const { app, agent, caddy } = await setup(t);
  await seedRoutes(caddy, 20_000);
  const viaConnection = await overConnection(agent, "GET", "/v1/proxy/routes");
  const viaHttp = await overHttp(app, "GET", "/v1/proxy/routes");
  assert.equal(viaConnection.status, 200);
  assert.ok(
    viaConnection.body.length > 2 * 1024 * 1024,
    `${viaConnection.body.length} bytes, past the 1 MiB window`,
  );
  assert.equal(viaConnection.body, viaHttp.body);
});

test("a body past the agent's limit is refused over the connection, and the connection goes on", async (t) => {
  const { agent } = await setup(t);
  const big = JSON.stringify({
    domain: "big.test",
    upstreams: [{ dial: "127.0.0.1:9" }],
    pad: "x".repeat(3 * 1024 * 1024),
  });
  const res = await agent.fetch("/v1/proxy/routes", {
    method: "POST",
    body: big,
    headers: { "content-type": "application/json" },
  });
  assert.equal(res.status, 413);
  assert.equal(((await res.json()) as { code: string }).code, "payload_too_large");
  assert.equal((await agent.fetch("/v1/proxy/routes")).status, 200);
});

test("a signal shared by many requests keeps no listener of those that ended", async (t) => {
  const { agent } = await setup(t);
  const shared = new AbortController();
  for (let i = 0; i < 50; i++) await (await agent.fetch("/healthz", { signal: shared.signal })).text();
  assert.equal(getEventListeners(shared.signal, "abort").length, 0);
});

test("a read cancelled by the control plane ends its request; the connection goes on", async (t) => {
  const { agent, caddy } = await setup(t);
  await seedRoutes(caddy, 5_000);
  const controller = new AbortController();
  const pending = agent.fetch("/v1/proxy/routes", { signal: controller.signal });
  controller.abort();
  await assert.rejects(pending, { name: "AbortError" });
  assert.equal(agent.inFlight, 0);
  assert.equal((await agent.fetch("/v1/proxy/routes/r1.test")).status, 200);
});

/** `n` routes `r0.test`... written into Caddy in one request, as the agent would have made them. */
async function seedRoutes(caddy: TestCaddy, n: number): Promise<void> {
  const routes = Array.from(
    { length: n },
    (_, i) => buildRoute({ domain: `r${i}.test`, upstreams: [{ dial: "127.0.0.1:9" }] } as never).route,
  );
  await caddy.admin.write("PATCH", "/config/apps/http/servers/srv0/routes", routes);
}
