import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { TEST_TOKEN } from "../helpers/app.js";
import { type RawResponse, rawRequest, requestText } from "../helpers/raw-http.js";
import { concretePath, startGuardedAgent } from "./support.js";

const hex = (c: string, upper: boolean) => {
  const h = c.charCodeAt(0).toString(16).padStart(2, "0");
  return `%${upper ? h.toUpperCase() : h.toLowerCase()}`;
};
/** Percent-encodes every character of every segment, keeping the slashes. */
const encodeAll = (path: string, upper: boolean) =>
  path
    .split("/")
    .map((seg) => [...seg].map((c) => hex(c, upper)).join(""))
    .join("/");

/** Spellings of one path that the router decodes to the same route; the token must be checked on all. */
export function spellings(path: string): Record<string, string> {
  const m = /^\/([^/]+)(.*)$/.exec(path);
  assert.ok(m?.[1] !== undefined && m[2] !== undefined, path);
  // The first segment (`v1` for the API, `metrics`) and what follows it.
  const [first, rest] = [m[1], m[2]];
  const low = (c: string) => hex(c, false);
  return {
    plain: path,
    "first segment escaped": `/${[...first].map(low).join("")}${rest}`,
    "its last character escaped": `/${first.slice(0, -1)}${low(first.slice(-1))}${rest}`,
    "its first character escaped": `/${low(first.slice(0, 1))}${first.slice(1)}${rest}`,
    "every character, uppercase escapes": encodeAll(path, true),
    "every character, lowercase escapes": encodeAll(path, false),
    "a leading //": `/${path}`,
    "a ./ segment": rest === "" ? `/.${path}` : `/${first}/.${rest}`,
    "trailing ?": `${path}?`,
    "trailing ?query": `${path}?a=1`,
  };
}

function assertUnauthorized(res: RawResponse, what: string): void {
  assert.equal(res.status, 401, `${what}: ${res.status} ${res.body}`);
  assert.match(res.headers["content-type"] ?? "", /^application\/problem\+json/, what);
  assert.match(res.headers["www-authenticate"] ?? "", /^Bearer /, what);
  const body = JSON.parse(res.body);
  assert.equal(body.status, 401, what);
  assert.equal(body.code, "unauthorized", what);
}

const badAuthorizations: Record<string, Record<string, string>> = {
  "no Authorization header": {},
  "a wrong token": { authorization: "Bearer not-the-token" },
  "the token with one character changed": { authorization: `Bearer ${TEST_TOKEN.slice(0, -1)}x` },
  "the token as Basic credentials": {
    authorization: `Basic ${Buffer.from(`x:${TEST_TOKEN}`).toString("base64")}`,
  },
  "Bearer with no token": { authorization: "Bearer " },
};

describe("every registered route requires the token, however its path is spelled", async () => {
  test("walks the server's own route table", async (t) => {
    const agent = await startGuardedAgent(t);
    const routes = agent.app.registeredRoutes();
    const guarded = routes.filter((r) => !r.public);
    // The walk covers what is served: at least the ten operations of the spec plus the document.
    assert.ok(guarded.length >= 11, `only ${guarded.length} routes registered`);
    for (const route of guarded) {
      for (const [spelling, path] of Object.entries(spellings(concretePath(route.url)))) {
        for (const [who, headers] of Object.entries(badAuthorizations)) {
          const res = await rawRequest(
            agent.port,
            requestText(route.method, path, {
              headers: { ...headers, "content-type": "application/json" },
              body: route.method === "GET" || route.method === "HEAD" ? undefined : "{}",
            }),
          );
          const what = `${route.method} ${route.url} as ${spelling} (${path}) with ${who}`;
          if (route.method === "HEAD") assert.equal(res.status, 401, what);
          else assertUnauthorized(res, what);
        }
      }
    }
  });

  test("with the token, each spelling reaches the same route (a control for the walk above)", async (t) => {
    const agent = await startGuardedAgent(t);
    const auth = { authorization: `Bearer ${TEST_TOKEN}` };
    for (const route of agent.app.registeredRoutes().filter((r) => !r.public && r.method !== "HEAD")) {
      for (const [spelling, path] of Object.entries(spellings(concretePath(route.url)))) {
        // The router takes `//` and `/./` literally (404); only spellings that decode to the path route.
        if (spelling === "a leading //" || spelling === "a ./ segment") continue;
        const what = `${route.method} ${route.url} as ${spelling}`;
        // Routes with effects get a body that cannot be parsed: past the token, before any handler.
        const res = await rawRequest(
          agent.port,
          route.method === "GET"
            ? requestText("GET", path, { headers: auth })
            : requestText(route.method, path, {
                headers: { ...auth, "content-type": "application/json" },
                body: "{not json",
              }),
        );
        assert.notEqual(res.status, 401, what);
        // The route's own answer, not the router's: a 404 here may only be the route's own (no such update).
        // (`/metrics` answers text, which is no problem body.)
        const json = /json/.test(res.headers["content-type"] ?? "");
        assert.notEqual(
          json ? JSON.parse(res.body || "{}").code : undefined,
          "not_found",
          `${what}: ${res.body}`,
        );
        if (route.method !== "GET") assert.equal(JSON.parse(res.body).code, "malformed_body", what);
      }
    }
  });

  test("only the liveness and readiness probes are public", async (t) => {
    const agent = await startGuardedAgent(t);
    const open = agent.app
      .registeredRoutes()
      .filter((r) => r.public)
      .map((r) => `${r.method} ${r.url}`)
      .sort();
    assert.deepEqual(open, ["GET /healthz", "GET /readyz", "HEAD /healthz", "HEAD /readyz"]);
    for (const path of ["/healthz", "/readyz"]) {
      const res = await rawRequest(agent.port, requestText("GET", path));
      assert.equal(res.status, 200, `${path}: ${res.body}`);
    }
  });

  test("unknown paths, wrong methods and unreadable paths are 401 without the token", async (t) => {
    const agent = await startGuardedAgent(t);
    const cases: [string, string][] = [
      ["GET", "/v1/nothing-here"],
      ["GET", "/"],
      ["GET", "/%76%31/nothing"],
      ["PATCH", "/v1/proxy/routes/example.test"],
      ["GET", "/v1/proxy/routes/%"],
      ["GET", "/v1/proxy/routes/%zz"],
      ["DELETE", "/v1/proxy/routes/%FF%FE"],
      ["GET", `/v1/operator/update/${"a".repeat(5000)}`],
    ];
    for (const [method, path] of cases) {
      for (const [who, headers] of Object.entries(badAuthorizations))
        assertUnauthorized(
          await rawRequest(agent.port, requestText(method, path, { headers })),
          `${method} ${path.slice(0, 60)} with ${who}`,
        );
    }
  });
});

describe("with the token, what the router cannot serve is a problem", () => {
  test("an unknown path is 404 and a wrong method on a known path is 405 with Allow", async (t) => {
    const agent = await startGuardedAgent(t);
    const auth = { authorization: `Bearer ${TEST_TOKEN}` };
    let res = await rawRequest(agent.port, requestText("GET", "/v1/nothing-here", { headers: auth }));
    assert.equal(res.status, 404);
    assert.equal(JSON.parse(res.body).code, "not_found");

    res = await rawRequest(
      agent.port,
      requestText("PATCH", "/v1/proxy/routes/example.test", { headers: auth }),
    );
    assert.equal(res.status, 405, res.body);
    assert.equal(res.headers.allow, "DELETE, GET, HEAD, PUT");
    assert.equal(JSON.parse(res.body).code, "method_not_allowed");

    res = await rawRequest(agent.port, requestText("DELETE", "/v1/proxy/routes", { headers: auth }));
    assert.equal(res.status, 405);
    assert.equal(res.headers.allow, "GET, HEAD, POST");
  });

  test("a malformed percent escape is 400 problem+json", async (t) => {
    const agent = await startGuardedAgent(t);
    for (const path of ["/v1/proxy/routes/%", "/v1/proxy/routes/%zz", "/v1/proxy/routes/%FF%FE"]) {
      const res = await rawRequest(
        agent.port,
        requestText("DELETE", path, { headers: { authorization: `Bearer ${TEST_TOKEN}` } }),
      );
      assert.equal(res.status, 400, `${path}: ${res.body}`);
      assert.match(res.headers["content-type"] ?? "", /^application\/problem\+json/);
      assert.equal(JSON.parse(res.body).code, "malformed_request");
    }
  });
});
