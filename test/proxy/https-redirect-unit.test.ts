import assert from "node:assert/strict";
import { test } from "node:test";
import { goJson } from "../../src/caddy/routes/etag.js";
import { leadPlan, withLead } from "../../src/caddy/routes/leading-route.js";
import { type Op, plan, type RouteJson } from "../../src/caddy/routes/plan.js";
import { buildRoute } from "../../src/proxy/route/build-route.js";
import { HTTPS_REDIRECT_ID, httpsRedirect, redirectRoute } from "../../src/proxy/route/https-redirect.js";

const on = { enabled: true, httpsPort: 443 };
const lead = httpsRedirect(on);
const route = (domain: string, extra: Record<string, unknown> = {}) =>
  buildRoute({ domain, upstreams: [{ dial: "127.0.0.1:9" }], ...extra }).route;
const location = (r: RouteJson) =>
  (r.handle?.[0]?.headers as { Location: string[] } | undefined)?.Location[0];
const planned = (routes: RouteJson[], ops: Op[]) => {
  const p = plan(routes, ops, new Set());
  leadPlan(p, lead);
  return p;
};

test("the redirect's URL names the HTTPS port unless it is 443; the hosts of routes opting out are left out", () => {
  assert.equal(location(redirectRoute(on, [])), "https://{http.request.host}{http.request.uri}");
  assert.equal(
    location(redirectRoute({ enabled: true, httpsPort: 8443 }, [])),
    "https://{http.request.host}:8443{http.request.uri}",
  );
  const routes = [route("a.test"), route("b.test", { https_redirect: false, redirect_from: ["www.b.test"] })];
  assert.deepEqual(redirectRoute(on, routes).match, [
    { protocol: "http", not: [{ host: ["b.test", "www.b.test"] }] },
  ]);
  assert.deepEqual(redirectRoute(on, [routes[0] as RouteJson]).match, [{ protocol: "http" }]);
});

test("a plan puts the redirect first once, places new routes behind it, and writes it again only for changes of routes opting out", () => {
  // No routes yet: the first create brings the redirect, as one more applied change at 0.
  const first = planned([], [{ kind: "create", route: route("a.test") }]);
  assert.deepEqual(
    first.routes.map((r) => r["@id"]),
    [HTTPS_REDIRECT_ID, "a.test"],
  );
  assert.equal(first.applied.length, 2);
  // With it in place, a route of any host, a wildcard included, goes behind it; the redirect is untouched.
  const next = planned(first.routes, [{ kind: "create", route: route("*.w.test") }]);
  assert.equal(next.routes[0], first.routes[0]);
  assert.deepEqual(
    next.applied.map((a) => a.at),
    [2],
  );
  // A route opting out: the redirect leaves its host out, in the same plan.
  const opted = planned(next.routes, [{ kind: "create", route: route("p.test", { https_redirect: false }) }]);
  assert.deepEqual(opted.routes[0]?.match, [{ protocol: "http", not: [{ host: ["p.test"] }] }]);
  assert.equal(opted.applied.length, 2);
  // Its removal takes the host away again.
  const removed = planned(opted.routes, [{ kind: "delete", id: "p.test" }]);
  assert.deepEqual(removed.routes[0]?.match, [{ protocol: "http" }]);
  // A plan whose changes are all refused leaves the routes as they were.
  const refused = planned(removed.routes, [{ kind: "delete", id: "nothing.test" }]);
  assert.equal(refused.applied.length, 0);
  // Disabled: a plan never adds it.
  const p = plan([], [{ kind: "create", route: route("a.test") }], new Set());
  leadPlan(p, httpsRedirect({ ...on, enabled: false }));
  assert.deepEqual(
    p.routes.map((r) => r["@id"]),
    ["a.test"],
  );
});

test("the start's conformance moves the redirect first, takes a second one away, and removes it when disabled", () => {
  const a = route("a.test");
  const stray = { ...redirectRoute(on, []), match: [{ protocol: "http", host: ["x"] }] };
  assert.deepEqual(
    withLead([a, stray, route("b.test")], lead).map((r) => r["@id"]),
    [HTTPS_REDIRECT_ID, "a.test", "b.test"],
  );
  const settled = [redirectRoute(on, []), a];
  assert.equal(withLead(settled, lead), settled, "in line: the same array");
  assert.deepEqual(withLead(settled, httpsRedirect({ ...on, enabled: false })), [a]);
});

test("settledIn tells from Caddy's text whether the redirect leads, without parsing the routes", () => {
  const text = (routes: RouteJson[]) => goJson(routes);
  const a = route("a.test");
  assert.equal(lead.settledIn(text([redirectRoute(on, []), a])), true);
  assert.equal(lead.settledIn(text([redirectRoute(on, [])])), true);
  assert.equal(lead.settledIn(text([a, redirectRoute(on, [])])), false);
  assert.equal(lead.settledIn(text([a])), false);
  assert.equal(lead.settledIn(text([redirectRoute({ ...on, httpsPort: 8443 }, []), a])), false);
  // A route opting out: the text alone cannot say which hosts the redirect must leave out.
  const p = route("p.test", { https_redirect: false });
  assert.equal(lead.settledIn(text([redirectRoute(on, [p]), p])), false);
  const off = httpsRedirect({ ...on, enabled: false });
  assert.equal(off.settledIn(text([a])), true);
  assert.equal(off.settledIn(text([redirectRoute(on, []), a])), false);
});
