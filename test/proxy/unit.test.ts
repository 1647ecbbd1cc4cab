import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { caddyDuration } from "../../src/caddy/config.js";
import { type Op, opId, plan, type RouteJson, routeShadows } from "../../src/caddy/routes/plan.js";
import { DenyList } from "../../src/events/egress.js";
import { signWebhook } from "../../src/events/signing.js";
import { withStreamCloseDelay } from "../../src/proxy/route/streams.js";

/**
 * Where one route-by-route scan puts a new route: before the first existing route that would otherwise
 * take its requests (a catch-all, or a wildcard that covers it), else at the end. The reference the
 * indexed plan is checked against.
 */
function insertionIndex(routes: readonly RouteJson[], route: RouteJson): number {
  const hosts = route.match?.flatMap((m) => m.host ?? []) ?? [];
  if (hosts.length === 0) return routes.length;
  const i = routes.findIndex((r) => hosts.some((h) => routeShadows(r, h)));
  return i === -1 ? routes.length : i;
}

/** Whether a route with another @id serves one of `route`'s exact (non-wildcard) hosts, compared in lowercase. */
function takenHost(routes: readonly RouteJson[], route: RouteJson): boolean {
  const exact = (r: RouteJson) =>
    (r.match?.flatMap((m) => m.host ?? []) ?? []).filter((h) => !h.includes("*")).map((h) => h.toLowerCase());
  const mine = new Set(exact(route));
  return routes.some((r) => r["@id"] !== route["@id"] && exact(r).some((h) => mine.has(h)));
}

/** Where the plan puts `route`, created among `routes`. */
const placed = (routes: RouteJson[], route: RouteJson & { "@id": string }) =>
  plan(routes, [{ kind: "create", route }], new Set()).applied[0]?.at;

test("placement: before catch-alls and covering wildcards, else appended", () => {
  const r = (id: string, hosts?: string[]): RouteJson => ({
    "@id": id,
    ...(hosts ? { match: [{ host: hosts }] } : {}),
  });
  const routes = [r("x.test", ["x.test"]), r("*.shop.test", ["*.shop.test"]), r("catch-all")];
  assert.equal(placed(routes, r("a.shop.test", ["a.shop.test"]) as RouteJson & { "@id": string }), 1);
  assert.equal(placed(routes, r("y.test", ["y.test"]) as RouteJson & { "@id": string }), 2);
  assert.equal(placed(routes.slice(0, 2), r("y.test", ["y.test"]) as RouteJson & { "@id": string }), 2);
  assert.equal(
    placed(
      [r("p", undefined)].map((x) => ({ ...x, match: [{ path: ["/api"] }] })),
      r("z.test", ["z.test"]) as RouteJson & { "@id": string },
    ),
    0,
  );
});

test("plan applies changes in arrival order, each against the result of the ones before", () => {
  const mk = (id: string, v: number) =>
    ({ "@id": id, match: [{ host: [id] }], v }) as RouteJson & { "@id": string };
  const p = plan(
    [mk("a", 1)],
    [
      { kind: "create", route: mk("b", 1) },
      { kind: "create", route: mk("b", 2) },
      { kind: "delete", id: "b" },
      { kind: "replace", id: "a", route: mk("a", 2) },
      { kind: "delete", id: "zz" },
      { kind: "create", route: mk("taken", 1) },
    ],
    new Set(["taken"]),
  );
  assert.deepEqual(
    p.outcomes.map((o) => (o.outcome.kind === "applied" ? "ok" : o.outcome.kind)),
    ["ok", "exists", "ok", "ok", "not_found", "exists"],
  );
  assert.deepEqual(p.routes, [mk("a", 2)]);
  const prev = p.outcomes[3];
  assert.ok(prev?.outcome.kind === "applied");
  assert.deepEqual(prev.previous, mk("a", 1));
});

test("plan places and finds routes as one route-by-route scan would, duplicates, wildcards and catch-alls included", () => {
  // The scan plan replaced (it tested every route's matchers for every create): the reference.
  const reference = (current: RouteJson[], ops: Op[]) => {
    const routes = [...current];
    const outcomes: string[] = [];
    for (const op of ops) {
      const at = routes.findIndex((r) => r["@id"] === opId(op));
      if (op.kind === "delete" || op.kind === "replace") {
        if (at === -1) {
          outcomes.push("not_found");
          continue;
        }
      }
      if (op.kind === "create" && at !== -1) {
        outcomes.push("exists");
        continue;
      }
      // A host belongs to one route: another route serving one of the exact hosts refuses a create or replace.
      if (op.kind !== "delete" && op.kind !== "put" && takenHost(routes, op.route)) {
        outcomes.push("host_taken");
        continue;
      }
      if (op.kind === "delete") routes.splice(at, 1);
      else if (at !== -1) routes[at] = op.route;
      else routes.splice(insertionIndex(routes, op.route), 0, op.route);
      outcomes.push("ok");
    }
    return { routes, outcomes };
  };
  const host = fc.constantFrom("a.t", "A.t", "b.t", "x.a.t", "*.a.t", "*.t", "c.t");
  const route = fc
    .record({
      id: fc.constantFrom("a.t", "b.t", "c.t", "x.a.t", "*.a.t", "p"),
      hosts: fc.option(fc.array(host, { minLength: 1, maxLength: 2 }), { nil: undefined }),
      // A second matcher set without a host matcher takes requests for any host, as no matcher sets do.
      pathOnly: fc.boolean(),
      v: fc.nat(3),
    })
    .map(
      ({ id, hosts, pathOnly, v }) =>
        ({
          "@id": id,
          ...(hosts ? { match: [{ host: hosts }, ...(pathOnly ? [{ path: ["/p"] }] : [])] } : {}),
          v,
        }) as RouteJson & { "@id": string },
    );
  const op: fc.Arbitrary<Op> = fc.oneof(
    route.map((r) => ({ kind: "create" as const, route: r })),
    route.map((r) => ({ kind: "put" as const, route: r })),
    route.map((r) => ({ kind: "replace" as const, id: r["@id"], route: r })),
    fc.constantFrom("a.t", "b.t", "p", "zz").map((id) => ({ kind: "delete" as const, id })),
  );
  fc.assert(
    fc.property(fc.array(route, { maxLength: 8 }), fc.array(op, { maxLength: 8 }), (current, ops) => {
      const p = plan(current, ops, new Set());
      const want = reference(current, ops);
      assert.deepEqual(
        p.outcomes.map((o) => (o.outcome.kind === "applied" ? "ok" : o.outcome.kind)),
        want.outcomes,
      );
      assert.deepEqual(p.routes, want.routes);
    }),
    { numRuns: 3000 },
  );
});

test("deny list matches ranges, IPv4-mapped IPv6 included", () => {
  const d = new DenyList(["169.254.0.0/16", "fe80::/10"]);
  assert.ok(d.denies("169.254.169.254"));
  assert.ok(d.denies("::ffff:169.254.169.254"));
  assert.ok(d.denies("fe80::1"));
  assert.ok(!d.denies("127.0.0.1"));
  assert.ok(!d.denies("10.0.0.1"));
});

test("webhook signature matches the Standard Webhooks reference vector", () => {
  // The example from the Standard Webhooks specification.
  const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const body = '{"test": 2432232314}';
  assert.equal(
    signWebhook(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
    "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
  );
});

describe("stream_close_delay on routes", () => {
  const rp = (extra: Record<string, unknown> = {}) => ({
    handler: "reverse_proxy",
    upstreams: [{ dial: "127.0.0.1:9" }],
    ...extra,
  });
  test("a delay is written the way Caddy reads durations", () => {
    assert.deepEqual([120_000, 90_000, 1500].map(caddyDuration), ["2m", "90s", "1500ms"]);
  });
  test("every reverse_proxy handler gets it, inside subroutes too; other handlers are left alone", () => {
    const route = {
      "@id": "x.test",
      handle: [
        { handler: "subroute", routes: [{ handle: [rp()] }] },
        rp(),
        { handler: "static_response", body: "s" },
      ],
    };
    assert.deepEqual(withStreamCloseDelay(route, 60_000).handle, [
      { handler: "subroute", routes: [{ handle: [rp({ stream_close_delay: "1m" })] }] },
      rp({ stream_close_delay: "1m" }),
      { handler: "static_response", body: "s" },
    ]);
  });
  test("a route that has it already is the same object; an equal value in nanoseconds counts", () => {
    const has = { handle: [rp({ stream_close_delay: "1m" })] };
    assert.equal(withStreamCloseDelay(has, 60_000), has);
    const nanos = { handle: [rp({ stream_close_delay: 60e9 })] };
    assert.equal(withStreamCloseDelay(nanos, 60_000), nanos);
    assert.notEqual(withStreamCloseDelay(has, 30_000), has);
  });
  test("0 takes it away", () => {
    assert.deepEqual(withStreamCloseDelay({ handle: [rp({ stream_close_delay: "1m" })] }, 0), {
      handle: [rp()],
    });
  });
});
