import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { RouteJson } from "../../src/caddy/routes/plan.js";
import { projectRoot } from "../../src/paths.js";
import { buildRoute, routeIssues } from "../../src/proxy/route/build-route.js";
import { withStreamCloseDelay } from "../../src/proxy/route/streams.js";
import { writtenRequest } from "../../src/proxy/route/written-request.js";
import type { RouteWriteRequest } from "../../src/proxy/schemas.js";
import { canonicalJson } from "../../src/util/canonical-json.js";
import { headerValue, request, schemaCheck, text } from "./write-requests.js";

/*
 * `writtenRequest` reads a route back as the write request that makes it; `buildRoute` makes the route of a
 * request. Unit tests, no Caddy: every valid request survives the round trip (its placeholders' text too),
 * a route changed after it was written has no request, and a plain request is written as documented.
 */

const same = (a: RouteJson, b: RouteJson) => assert.equal(canonicalJson(a), canonicalJson(b));

describe("every valid request is read back from its route", () => {
  test("the generated requests are ones the API accepts", async () => {
    const check = await schemaCheck();
    for (const r of fc.sample(request, 300)) {
      assert.equal(await check(r), "ok", JSON.stringify(r));
      assert.deepEqual(routeIssues(r), [], JSON.stringify(r));
    }
  });

  test("the request read back builds the same route, with and without stream_close_delay", () => {
    fc.assert(
      fc.property(request, (r) => {
        const route = buildRoute(r).route;
        const written = writtenRequest(route);
        assert.ok(written, `no request read back from ${JSON.stringify(route)}`);
        same(buildRoute(written).route, route);
        // The normalised form is a fixed point: read back again, it is itself.
        assert.deepEqual(writtenRequest(buildRoute(written).route), written);
        const delayed = withStreamCloseDelay(route, 120_000);
        assert.notEqual(canonicalJson(delayed), canonicalJson(route));
        assert.deepEqual(writtenRequest(delayed), written);
        assert.deepEqual(writtenRequest(withStreamCloseDelay(route, 1_500)), written);
        assert.equal("callback_url" in written, false);
      }),
      // `headers: {}` alone once compiled to a subroute no request reads back from.
      { numRuns: 500, examples: [[{ domain: "e.test", upstreams: [{ dial: "127.0.0.1:1" }], headers: {} }]] },
    );
  });

  test("a callback_url is not part of what is read back", () => {
    const r = { domain: "cb.test", upstreams: [{ dial: "127.0.0.1:1" }], callback_url: "https://h.test/x" };
    assert.deepEqual(writtenRequest(buildRoute(r).route), {
      domain: "cb.test",
      upstreams: [{ dial: "127.0.0.1:1" }],
      strategy: "first",
      terminal: true,
    });
  });
});

/** Every string value in `v`, with the key it is under (or the key of the array that holds it). */
function strings(v: unknown, key = ""): [string, string][] {
  if (typeof v === "string") return [[key, v]];
  if (Array.isArray(v)) return v.flatMap((x) => strings(x, key));
  if (v && typeof v === "object") return Object.entries(v).flatMap(([k, x]) => strings(x, k));
  return [];
}

describe("placeholder text survives the round trip exactly", () => {
  const TEXTS = ["{env.HOME}", "\\{x}", "a\\{b}", "a\\\\{b}", "}{", "{file./etc/hostname}", "\\}", "x\\"];
  const site = (t: string, i: number): RouteWriteRequest => ({
    domain: "ph.test",
    upstreams: [{ dial: "127.0.0.1:1" }],
    basic_auth: { realm: "{env.HOME}", users: [{ username: t, password_hash: `$2b$10$${"a".repeat(53)}` }] },
    headers: { request: { set: { "X-In": t } }, response: { set: { "X-Out": t, [`X-${i}`]: `<${t}>` } } },
    maintenance: { body: `<p>${t}</p>`, content_type: `text/plain; v="${t.replaceAll("\\", "")}"` },
  });

  for (const [i, t] of TEXTS.entries())
    test(JSON.stringify(t), () => {
      const r = site(t, i);
      const route = buildRoute(r).route;
      const text = JSON.stringify(route);
      // Caddy takes a brace right after a backslash as literal (dropping that backslash): every brace Caddy
      // gets is one, so it expands none. The realm is the one string Caddy does not expand.
      for (const [key, value] of strings(route))
        if (key !== "realm") assert.doesNotMatch(value, /(^|[^\\])[{}]/, `${key}: ${text}`);
      const back = writtenRequest(route);
      assert.ok(back, text);
      assert.deepEqual(back.basic_auth?.users[0]?.username, t);
      assert.equal(back.basic_auth?.realm, "{env.HOME}");
      assert.deepEqual(back.headers, r.headers);
      assert.deepEqual(back.maintenance?.body, r.maintenance?.body);
      assert.deepEqual(back.maintenance?.content_type, r.maintenance?.content_type);
    });

  test("escaped as Caddy reads a literal brace: a backslash before each, and nothing else changed", () => {
    const route = buildRoute(site("{env.HOME}", 0)).route;
    const handlers = JSON.stringify(route);
    assert.ok(handlers.includes(JSON.stringify("\\{env.HOME\\}")), handlers);
    assert.ok(handlers.includes(JSON.stringify("<p>\\{env.HOME\\}</p>")), handlers);
    // The realm is not expanded by Caddy: written as given.
    assert.ok(handlers.includes('"realm":"{env.HOME}"'), handlers);
  });

  test("any text at all, in every escaped place", () => {
    fc.assert(
      fc.property(text(30), headerValue, (t, v) => {
        const user = t.length > 0 && !t.includes(":") && !/\p{Cc}/u.test(t) ? t : "u";
        const r = {
          ...site(user, 0),
          headers: { response: { set: { "X-V": v } } },
          maintenance: { body: t },
        };
        const back = writtenRequest(buildRoute(r).route);
        assert.equal(back?.basic_auth?.users[0]?.username, user);
        assert.equal(back?.headers?.response?.set?.["X-V"], v);
        assert.equal(back?.maintenance?.body, t);
      }),
      { numRuns: 500 },
    );
  });
});

describe("a route no write request makes has none", () => {
  const HASH = `$2y$12$${"b".repeat(53)}`;
  const full = (): RouteJson =>
    buildRoute({
      domain: "full.test",
      upstreams: [{ dial: "127.0.0.1:1" }, { dial: "127.0.0.1:2", weight: 3 }],
      strategy: "weighted_round_robin",
      redirect_from: ["www.full.test"],
      paths: [{ prefix: "/api", upstreams: [{ dial: "127.0.0.1:3" }], strip_prefix: true }],
      basic_auth: { users: [{ username: "ana", password_hash: HASH }] },
      allow_ips: ["10.0.0.0/8"],
      headers: { request: { set: { "X-A": "1" } }, response: { delete: ["Server"] } },
      maintenance: { retry_after: 60 },
      encode: ["zstd"],
    }).route;
  /** The route's subroute handler's routes, to edit in place. */
  const subroutes = (r: RouteJson) => (r.handle?.[0] as { routes: RouteJson[] } | undefined)?.routes ?? [];
  const handlerOf = (r: RouteJson, i: number, j = 0) =>
    subroutes(r)[i]?.handle?.[j] as Record<string, unknown>;

  test("the route as built is read back (the edits below are what make the difference)", () => {
    assert.ok(writtenRequest(full()));
  });

  const edits: [string, (r: RouteJson) => void][] = [
    ["an extra handler beside the subroute", (r) => r.handle?.push({ handler: "vars", a: 1 })],
    [
      "an extra handler inside the subroute",
      (r) => subroutes(r).splice(3, 0, { handle: [{ handler: "vars" }] }),
    ],
    [
      "an extra handler before a path's upstreams",
      (r) => subroutes(r)[5]?.handle?.unshift({ handler: "vars" }),
    ],
    ["the subroutes in another order", (r) => subroutes(r).reverse()],
    [
      "an upstream with a field of its own",
      (r) => Object.assign(handlerOf(r, 6).upstreams as object[], [{ dial: "127.0.0.1:1", max_requests: 5 }]),
    ],
    [
      "an upstream's dial in a form the agent does not write",
      (r) => ((handlerOf(r, 5, 1).upstreams as { dial: string }[])[0] = { dial: "LocalHost.:3" }),
    ],
    [
      "an upstream added without a weight",
      (r) => (handlerOf(r, 6).upstreams as object[]).push({ dial: "127.0.0.1:4" }),
    ],
    [
      "a reverse_proxy with a transport",
      (r) => Object.assign(handlerOf(r, 6), { transport: { protocol: "http" } }),
    ],
    [
      "a header value Caddy would expand",
      (r) => ((handlerOf(r, 3, 2).request as { set: Record<string, string[]> }).set["X-A"] = ["{env.HOME}"]),
    ],
    [
      "a header with two values",
      (r) => ((handlerOf(r, 3, 2).request as { set: Record<string, string[]> }).set["X-A"] = ["1", "2"]),
    ],
    [
      "a username Caddy would expand",
      (r) =>
        Object.assign(
          (handlerOf(r, 3).providers as { http_basic: { accounts: object[] } }).http_basic.accounts[0] ?? {},
          { username: "{env.USER}" },
        ),
    ],
    [
      "the auth hash cache removed",
      (r) =>
        delete (handlerOf(r, 3).providers as { http_basic: Record<string, unknown> }).http_basic.hash_cache,
    ],
    [
      "the redirect's Location changed",
      (r) =>
        Object.assign(handlerOf(r, 0), {
          headers: { Location: ["https://elsewhere.test{http.request.uri}"] },
        }),
    ],
    ["the decoy route left out (the shape before it)", (r) => subroutes(r).splice(2, 1)],
    [
      "the decoy's hash of another cost than the users'",
      (r) =>
        Object.assign(
          (handlerOf(r, 3).providers as { http_basic: { accounts: object[] } }).http_basic.accounts[1] ?? {},
          { password: `$2b$04$${"c".repeat(53)}` },
        ),
    ],
    [
      "the decoy's account left out",
      (r) => (handlerOf(r, 3).providers as { http_basic: { accounts: object[] } }).http_basic.accounts.pop(),
    ],
    [
      "the decoy's matcher naming other users",
      (r) =>
        Object.assign(subroutes(r)[2] ?? {}, {
          match: [{ not: [{ vars_regexp: { "{http.request.header.Authorization}": { pattern: "^" } } }] }],
        }),
    ],
    ["the maintenance page closing connections", (r) => Object.assign(handlerOf(r, 4), { close: true })],
    ["a second matcher set", (r) => r.match?.push({ host: ["other.test"] })],
    ["a path matcher beside the host", (r) => Object.assign(r.match?.[0] ?? {}, { path: ["/x"] })],
    ["an @id other than the domain", (r) => Object.assign(r, { "@id": "other.test" })],
    ["the domain in another case", (r) => r.match?.[0]?.host?.splice(0, 1, "FULL.test")],
    ["terminal absent", (r) => delete r.terminal],
    ["no matcher", (r) => delete r.match],
    ["a host list that is empty", (r) => r.match?.[0]?.host?.splice(0)],
  ];
  for (const [name, edit] of edits)
    test(name, () => {
      const route = structuredClone(full());
      edit(route);
      assert.notEqual(canonicalJson(route), canonicalJson(full()), "the edit changed nothing");
      assert.equal(writtenRequest(route), undefined, JSON.stringify(route));
      assert.equal(writtenRequest(withStreamCloseDelay(route, 120_000)), undefined);
    });

  test("an upstream edited into another form a request makes reads back as that request", () => {
    const route = full();
    (handlerOf(route, 5, 1).upstreams as { dial: string }[])[0] = { dial: "127.0.0.1:9" };
    assert.deepEqual(writtenRequest(route)?.paths?.[0]?.upstreams, [{ dial: "127.0.0.1:9" }]);
  });

  const plain = (r: RouteJson) => ({ "@id": "h.test", match: [{ host: ["h.test"] }], terminal: true, ...r });
  const handWritten: [string, RouteJson][] = [
    ["a static response", plain({ handle: [{ handler: "static_response", body: "hi" }] })],
    ["a file server", plain({ handle: [{ handler: "file_server", root: "/srv" }] })],
    [
      "a reverse_proxy without load_balancing",
      plain({ handle: [{ handler: "reverse_proxy", upstreams: [{ dial: "127.0.0.1:1" }] }] }),
    ],
    [
      "a reverse_proxy with an unknown policy",
      plain({
        handle: [
          {
            handler: "reverse_proxy",
            upstreams: [{ dial: "127.0.0.1:1" }],
            load_balancing: { selection_policy: { policy: "random" } },
          },
        ],
      }),
    ],
    [
      "a subroute of its own",
      plain({ handle: [{ handler: "subroute", routes: [{ handle: [{ handler: "static_response" }] }] }] }),
    ],
    ["an empty subroute", plain({ handle: [{ handler: "subroute", routes: [] }] })],
    ["no handlers", plain({ handle: [] })],
    [
      "a catch-all",
      {
        handle: [
          {
            handler: "reverse_proxy",
            upstreams: [{ dial: "127.0.0.1:1" }],
            load_balancing: { selection_policy: { policy: "first" } },
          },
        ],
        terminal: true,
      },
    ],
  ];
  for (const [name, route] of handWritten)
    test(`hand-written: ${name}`, () => assert.equal(writtenRequest(route), undefined));
});

describe("a plain request is written as documented", () => {
  /** The JSON block of docs/api/proxy-routes.md's "What is written to Caddy". */
  function documented(): unknown {
    const page = readFileSync(join(projectRoot(), "docs/api/proxy-routes.md"), "utf8");
    const section = page.split("\n## What is written to Caddy\n")[1]?.split("\n## ")[0] ?? "";
    const block = /```json\n([\s\S]*?)\n```/.exec(section)?.[1];
    assert.ok(block, "the section has no JSON block");
    return JSON.parse(block);
  }

  for (const [name, extra] of [
    ["with the defaults left out", {}],
    ["with the defaults given", { strategy: "first", terminal: true }],
    ["with headers that change nothing", { headers: {} }],
  ] as const)
    test(name, () => {
      const r = { domain: "App.Example.com.", upstreams: [{ dial: "10.0.0.7:8080" }], ...extra };
      const route = buildRoute(r).route;
      assert.equal(canonicalJson(withStreamCloseDelay(route, 120_000)), canonicalJson(documented()));
      assert.equal(JSON.stringify(route).includes("stream_close_delay"), false);
    });

  test("weighted_round_robin gives its weights in the policy", () => {
    const route = buildRoute({
      domain: "w.test",
      strategy: "weighted_round_robin",
      upstreams: [{ dial: "10.0.0.7:8080", weight: 3 }, { dial: "10.0.0.8:8080" }],
    }).route;
    assert.deepEqual(route.handle, [
      {
        handler: "reverse_proxy",
        upstreams: [{ dial: "10.0.0.7:8080" }, { dial: "10.0.0.8:8080" }],
        load_balancing: { selection_policy: { policy: "weighted_round_robin", weights: [3, 1] } },
      },
    ]);
  });
});
