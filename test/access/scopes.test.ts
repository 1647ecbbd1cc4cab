import assert from "node:assert/strict";
import { describe, test } from "node:test";
import Fastify from "fastify";
import { GRANTS, type Grant } from "../../src/access/scopes.js";
import { requireRouteScopes } from "../../src/http/auth.js";
import { RouteTable, trackRoutes } from "../../src/http/edge.js";
import { TEST_TOKEN } from "../helpers/app.js";
import { rawRequest, requestText } from "../helpers/raw-http.js";
import {
  concretePath,
  type NamedToken,
  secretOf,
  startGuardedAgent,
  writeTokensFile,
} from "../http/support.js";

const single = (g: Grant): NamedToken => {
  const name = g === "*" ? "all" : `only-${g.replace(":", "-")}`;
  return { name, scopes: [g], secret: secretOf(name) };
};

describe("every route needs its scopes, walked over the server's own route table", () => {
  test("a token with exactly a route's scopes passes, every other single scope is 403 naming the scope", async (t) => {
    // The scope sets of the routes are only known once the app is built: a first agent tells them.
    const probe = await startGuardedAgent(t);
    const sets = new Map<string, readonly Grant[]>();
    for (const r of probe.app.registeredRoutes())
      if (!r.public && r.scopes.length > 1) sets.set(r.scopes.join(" "), r.scopes);
    const exact = [...sets.values()].map((scopes, i) => ({
      name: `exact-${i}`,
      scopes,
      secret: secretOf(`exact-${i}`),
    }));
    const tokens: NamedToken[] = [...GRANTS.map(single), ...exact];
    const file = writeTokensFile(t, tokens);
    const agent = await startGuardedAgent(t, { HOSTKEEPER_TOKENS_FILE: file });

    const guarded = agent.app.registeredRoutes().filter((r) => !r.public);
    assert.ok(guarded.length >= 18, `only ${guarded.length} routes registered`);
    let allowedCount = 0;
    let refusedCount = 0;
    for (const route of guarded) {
      assert.ok(Array.isArray(route.scopes), `${route.method} ${route.url} has no scopes`);
      const path = concretePath(route.url);
      for (const token of tokens) {
        const held = new Set<Grant>(token.scopes);
        const missing: Grant[] = held.has("*") ? [] : route.scopes.filter((s) => !held.has(s));
        const isSingle = token.scopes.length === 1;
        const isExact = token.scopes.join(" ") === route.scopes.join(" ");
        if (!isSingle && !isExact) continue;
        const headers = { authorization: `Bearer ${token.secret}` };
        // Routes with effects get a body that cannot be parsed: past the token and scopes, before any handler.
        const res = await rawRequest(
          agent.port,
          route.method === "GET" || route.method === "HEAD"
            ? requestText(route.method, path, { headers })
            : requestText(route.method, path, {
                headers: { ...headers, "content-type": "application/json" },
                body: "{not json",
              }),
        );
        const what: string = `${route.method} ${route.url} (needs ${route.scopes.join(" ") || "any token"}) with ${token.name}`;
        if (missing.length === 0) {
          allowedCount++;
          assert.notEqual(res.status, 401, `${what}: ${res.body}`);
          assert.notEqual(res.status, 403, `${what}: ${res.body}`);
          if (route.method !== "GET" && route.method !== "HEAD")
            assert.equal(JSON.parse(res.body).code, "malformed_body", what);
          continue;
        }
        refusedCount++;
        assert.equal(res.status, 403, `${what}: ${res.body}`);
        assert.match(res.headers["www-authenticate"] ?? "", /error="insufficient_scope"/, what);
        assert.ok((res.headers["www-authenticate"] ?? "").includes(missing.join(" ")), what);
        if (route.method === "HEAD") continue;
        assert.match(res.headers["content-type"] ?? "", /^application\/problem\+json/, what);
        const body = JSON.parse(res.body);
        assert.equal(body.code, "insufficient_scope", what);
        assert.deepEqual(body.required_scopes, missing, what);
        for (const s of missing) assert.ok(body.detail.includes(s), `${what}: ${body.detail}`);
        assert.ok(body.detail.includes(token.name), `${what}: ${body.detail}`);
      }
    }
    // Both halves of the matrix ran: each route was reached by some token and refused to others.
    assert.ok(allowedCount >= guarded.length, `${allowedCount} allowed`);
    assert.ok(refusedCount >= guarded.length, `${refusedCount} refused`);
  });

  test("the decided scopes of the routes outside the areas, and the areas' derived ones", async (t) => {
    const agent = await startGuardedAgent(t);
    const scopes = Object.fromEntries(
      agent.app.registeredRoutes().map((r) => [`${r.method} ${r.url}`, r.scopes.join(" ")]),
    );
    assert.equal(scopes["GET /v1/events"], "proxy:read operator:read system:read agent:read");
    assert.equal(
      scopes["POST /v1/events/:event_id/redeliver"],
      "proxy:write operator:write system:write agent:write",
    );
    assert.equal(scopes["GET /v1/status"], "system:read");
    assert.equal(scopes["GET /metrics"], "system:read");
    assert.equal(scopes["GET /v1/openapi.json"], "");
    assert.equal(scopes["GET /v1/audit"], "*");
    assert.equal(scopes["POST /v1/tokens/:name/rotate"], "*");
    assert.equal(scopes["GET /v1/proxy/routes"], "proxy:read");
    assert.equal(scopes["HEAD /v1/proxy/routes"], "proxy:read");
    assert.equal(scopes["DELETE /v1/proxy/routes/:route_id"], "proxy:write");
    assert.equal(scopes["POST /v1/system/check-updates"], "system:write");
    assert.equal(scopes["POST /v1/operator/update"], "operator:write");
    assert.equal(scopes["GET /v1/operator/running-instance"], "operator:read");
    assert.equal(scopes["POST /v1/agent/update"], "agent:write");
    assert.equal(scopes["GET /v1/agent/update/:id"], "agent:read");
  });

  test("the single HOSTKEEPER_TOKEN holds every scope beside the tokens file", async (t) => {
    const file = writeTokensFile(t, [single("proxy:read")]);
    const agent = await startGuardedAgent(t, { HOSTKEEPER_TOKENS_FILE: file });
    for (const path of ["/v1/audit", "/v1/status", "/v1/proxy/routes", "/metrics"]) {
      const res = await rawRequest(
        agent.port,
        requestText("GET", path, { headers: { authorization: `Bearer ${TEST_TOKEN}` } }),
      );
      assert.equal(res.status, 200, `${path}: ${res.body}`);
    }
  });

  test("the OpenAPI document gives each operation its scopes as its security requirement", async (t) => {
    const agent = await startGuardedAgent(t);
    const res = await agent.call({ method: "GET", url: "/v1/openapi.json" });
    const doc = res.json() as {
      paths: Record<string, Record<string, { security?: unknown; responses: Record<string, unknown> }>>;
    };
    let checked = 0;
    for (const r of agent.app.registeredRoutes()) {
      const item = doc.paths[r.url.replace(/:([A-Za-z_]+)/g, "{$1}")];
      const op = item?.[r.method.toLowerCase()];
      if (!op) continue;
      checked++;
      assert.deepEqual(op.security, [{ bearer: [...r.scopes] }], `${r.method} ${r.url}`);
      assert.ok(op.responses["403"], `${r.method} ${r.url} documents 403`);
      assert.ok(op.responses["429"], `${r.method} ${r.url} documents 429`);
    }
    assert.ok(checked >= 14, `only ${checked} operations checked`);
  });
});

describe("a route gets its scopes by construction", () => {
  const build = () => {
    const app = Fastify();
    const table = new RouteTable();
    requireRouteScopes(app);
    trackRoutes(app, table);
    return { app, table };
  };

  test("a new route in an area gets the area's scope from its method, without any list to edit", async () => {
    const { app, table } = build();
    app.post("/v1/system/download-updates", async () => ({}));
    app.get("/v1/system/applies/:id", async () => ({}));
    await app.ready();
    const scopes = Object.fromEntries(table.routes().map((r) => [`${r.method} ${r.url}`, r.scopes]));
    assert.deepEqual(scopes["POST /v1/system/download-updates"], ["system:write"]);
    assert.deepEqual(scopes["GET /v1/system/applies/:id"], ["system:read"]);
    assert.deepEqual(scopes["HEAD /v1/system/applies/:id"], ["system:read"]);
    await app.close();
  });

  test("a route outside the areas that declares no scopes stops the start", async () => {
    const { app } = build();
    await assert.rejects(async () => {
      app.get("/v1/something-new", async () => ({}));
      await app.ready();
    }, /GET \/v1\/something-new declares no token scopes/);
  });

  test("one route for reads and writes must declare its scopes", async () => {
    const { app } = build();
    await assert.rejects(async () => {
      app.route({ method: ["GET", "POST"], url: "/v1/proxy/both", handler: async () => ({}) });
      await app.ready();
    }, /GET,POST \/v1\/proxy\/both declares no token scopes/);
  });

  test("a public probe needs no scopes, and a declared scope wins over the derived one", async () => {
    const { app, table } = build();
    app.get("/livez", { config: { public: true } }, async () => ({}));
    app.post("/v1/proxy/special", { config: { scopes: ["*"] } }, async () => ({}));
    await app.ready();
    const scopes = Object.fromEntries(table.routes().map((r) => [`${r.method} ${r.url}`, r.scopes]));
    assert.deepEqual(scopes["GET /livez"], []);
    assert.deepEqual(scopes["POST /v1/proxy/special"], ["*"]);
    await app.close();
  });
});
