import assert from "node:assert/strict";
import { test } from "node:test";
import { DenyList } from "../../src/events/egress.js";
import { signWebhook } from "../../src/events/signing.js";
import { normalizeDomain } from "../../src/proxy/domain.js";
import { insertionIndex, plan, type RouteJson } from "../../src/proxy/plan.js";
import { dialProblem } from "../../src/proxy/service.js";

test("domain normalisation: lowercase punycode, no trailing dot, leading wildcard kept", () => {
  const ok = (d: string) => {
    const r = normalizeDomain(d);
    assert.ok(r.ok, d);
    return r.domain;
  };
  assert.equal(ok("App.Bücher.example."), "app.xn--bcher-kva.example");
  assert.equal(ok("*.Example.COM"), "*.example.com");
  assert.equal(ok("xn--bcher-kva.example"), "xn--bcher-kva.example");
  for (const bad of [
    "",
    ".",
    "a..b",
    "-a.test",
    "a/b.test",
    "a.test:80",
    "*",
    "a.*.test",
    `${"a".repeat(64)}.test`,
    "xn--a.test",
    "a b.test",
  ])
    assert.equal(normalizeDomain(bad).ok, false, bad);
});

test("dial validation: host:port with a port in 1-65535", () => {
  for (const good of ["127.0.0.1:80", "localhost:65535", "[::1]:8080", "app.internal:3000"])
    assert.equal(dialProblem(good), undefined, good);
  for (const bad of [
    "127.0.0.1",
    "127.0.0.1:0",
    "127.0.0.1:65536",
    ":80",
    "[::1]",
    "::1:80",
    "[zz]:80",
    "a b:80",
    "http://x:80",
    "x:080",
  ])
    assert.notEqual(dialProblem(bad), undefined, bad);
});

test("placement: before catch-alls and covering wildcards, else appended", () => {
  const r = (id: string, hosts?: string[]): RouteJson => ({
    "@id": id,
    ...(hosts ? { match: [{ host: hosts }] } : {}),
  });
  const routes = [r("x.test", ["x.test"]), r("*.shop.test", ["*.shop.test"]), r("catch-all")];
  assert.equal(insertionIndex(routes, r("a.shop.test", ["a.shop.test"])), 1);
  assert.equal(insertionIndex(routes, r("y.test", ["y.test"])), 2);
  assert.equal(insertionIndex(routes.slice(0, 2), r("y.test", ["y.test"])), 2);
  assert.equal(
    insertionIndex(
      [r("p", undefined)].map((x) => ({ ...x, match: [{ path: ["/api"] }] })),
      r("z.test", ["z.test"]),
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
    p.outcomes.map((o) => (o.ok ? "ok" : o.reason)),
    ["ok", "exists", "ok", "ok", "not_found", "exists"],
  );
  assert.deepEqual(p.routes, [mk("a", 2)]);
  const prev = p.outcomes[3];
  assert.ok(prev?.ok);
  assert.deepEqual(prev.previous, mk("a", 1));
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
