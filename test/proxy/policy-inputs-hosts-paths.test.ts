import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { assertAccepted, type Expected, type Refusal, refuse, sharedAgent } from "./refusals.js";

/*
 * Every rule of `redirect_from`, `redirect_status` and `paths` refused with a 400 naming the field, sent as a
 * create and as a replace of a route with policies, against a real Caddy, with nothing changed.
 */

const agent = sharedAgent(after);
const up = (port = 9) => ({ dial: `127.0.0.1:${port}` });
const many = <T>(n: number, f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));

const run = (cases: readonly Refusal[]) => {
  for (const c of cases)
    test(c.name, async () => {
      await refuse(await agent(), c);
    });
};

describe("redirect_from and redirect_status", () => {
  const at = (i: number, message: RegExp): Expected => [`body.redirect_from[${i}]`, message];
  run([
    {
      name: "more than 16 hosts",
      body: () => ({ redirect_from: many(17, (i) => `r${i}.test`) }),
      errors: [["body.redirect_from", /at most 16 items/]],
    },
    {
      name: "an empty list",
      body: () => ({ redirect_from: [] }),
      errors: [["body.redirect_from", /at least 1 item/]],
    },
    {
      name: "a wildcard host",
      body: () => ({ redirect_from: ["ok.test", "*.a.test"] }),
      errors: [at(1, /must not be a wildcard/)],
    },
    {
      name: "the route's own domain, written another way",
      body: (d) => ({ redirect_from: [`${d.toUpperCase()}.`] }),
      errors: [at(0, /is the route's own domain/)],
    },
    {
      name: "a host twice once normalised",
      body: () => ({ redirect_from: ["WWW.a.test", "www.a.test."] }),
      errors: [at(1, /names www\.a\.test twice/)],
    },
    {
      name: "a host twice once normalised, in Unicode and punycode",
      body: () => ({ redirect_from: ["Bücher.test", "xn--bcher-kva.test"] }),
      errors: [at(1, /names xn--bcher-kva\.test twice/)],
    },
    {
      name: "hosts that are not host names",
      body: () => ({
        redirect_from: ["a b.test", "x.test:80", "-x.test", "127.1", "a/b", "x..test", "xn--a.test"],
      }),
      errors: [
        at(0, /must be a host name/),
        at(1, /must be a host name/),
        at(2, /invalid label/),
        at(3, /IPv4 address in a shortened/),
        at(4, /must be a host name/),
        at(5, /invalid label/),
        at(6, /not valid punycode/),
      ],
    },
    {
      name: "an empty host and one too long",
      body: () => ({ redirect_from: ["", "a".repeat(513)] }),
      errors: [
        ["body.redirect_from[0]", /at least 1 character/],
        ["body.redirect_from[1]", /at most 512 characters/],
      ],
    },
    {
      name: "a host of more than 253 characters once in ASCII",
      body: () => ({ redirect_from: [many(5, () => "a".repeat(60)).join(".")] }),
      errors: [at(0, /longer than 253/)],
    },
    {
      name: "any host on a wildcard domain",
      wildcard: true,
      body: () => ({ redirect_from: ["www.wild.test"] }),
      errors: [["body.redirect_from", /not allowed on a wildcard domain/]],
    },
    {
      name: "redirect_status without redirect_from",
      body: () => ({ redirect_status: 301 }),
      errors: [["body.redirect_status", /only allowed with redirect_from/]],
    },
    ...[300, 303, 200, 399, "308", null].map(
      (status): Refusal => ({
        name: `redirect_status ${JSON.stringify(status)}`,
        body: () => ({ redirect_from: ["r.test"], redirect_status: status }),
        errors: [["body.redirect_status", /./]],
      }),
    ),
  ]);
});

describe("paths", () => {
  /** Two good entries before the one tested, so the index in the field is the entry's. */
  const third = (p: Record<string, unknown>) => ({
    paths: [
      { prefix: "/a", upstreams: [up()] },
      { prefix: "/b", upstreams: [up()] },
      { upstreams: [up()], ...p },
    ],
  });
  const prefix = (prefix: string, message: RegExp): Refusal => ({
    name: `prefix ${JSON.stringify(prefix.length > 40 ? `${prefix.slice(0, 20)}...` : prefix)}`,
    body: () => third({ prefix }),
    errors: [["body.paths[2].prefix", message]],
  });
  const CHARS = /letters, digits and .* only/;
  run([
    {
      name: "more than 64 entries",
      body: () => ({ paths: many(65, (i) => ({ prefix: `/p${i}`, upstreams: [up()] })) }),
      errors: [["body.paths", /at most 64 items/]],
    },
    { name: "an empty list", body: () => ({ paths: [] }), errors: [["body.paths", /at least 1 item/]] },
    prefix("api", /must start with \//),
    prefix("a/", /must start with \//),
    prefix("/", /at least 2 characters/),
    prefix("//", /must not end with \/|must not contain \/\//),
    prefix("/api/", /must not end with \//),
    prefix("/a//b", /must not contain \/\//),
    prefix("/api*", /must not contain \*, \? or #/),
    prefix("/api/*/x", /must not contain \*, \? or #/),
    prefix("/a?b=1", /must not contain \*, \? or #/),
    prefix("/a#b", /must not contain \*, \? or #/),
    prefix("/.", /\. or \.\. segment/),
    prefix("/..", /\. or \.\. segment/),
    prefix("/a/./b", /\. or \.\. segment/),
    prefix("/a/../b", /\. or \.\. segment/),
    prefix(`/${"a".repeat(256)}`, /at most 256 characters/),
    prefix("/a%20b", CHARS),
    prefix("/%2e%2e", CHARS),
    prefix("/café", CHARS),
    prefix("/a{b}", CHARS),
    prefix("/{env.HOME}", CHARS),
    prefix("/a b", CHARS),
    prefix("/a\\b", CHARS),
    prefix("/a\tb", CHARS),
    prefix('/a"b', CHARS),
    {
      name: "two prefixes that differ only in case",
      body: () => ({
        paths: [
          { prefix: "/Api", upstreams: [up()] },
          { prefix: "/x", upstreams: [up()] },
          { prefix: "/aPI", upstreams: [up()] },
        ],
      }),
      errors: [["body.paths[2].prefix", /is the prefix of paths\[0\] too/]],
    },
    {
      name: "a prefix missing, and an unknown field",
      body: () => third({ upstream: [up()] }),
      errors: [
        ["body.paths[2].prefix", /is required/],
        ["body.paths[2].upstream", /is not a known field/],
      ],
    },
  ]);
});

describe("the upstreams of a path", () => {
  const path = (p: Record<string, unknown>) => ({
    paths: [
      { prefix: "/ok", upstreams: [up()] },
      { prefix: "/api", ...p },
    ],
  });
  const dial = (d: string, message: RegExp): Refusal => ({
    name: `dial ${JSON.stringify(d)}`,
    body: () => path({ upstreams: [up(), { dial: d }] }),
    errors: [["body.paths[1].upstreams[1].dial", message]],
  });
  run([
    {
      name: "no upstreams",
      body: () => path({ upstreams: [] }),
      errors: [["body.paths[1].upstreams", /at least 1 item/]],
    },
    {
      name: "more than 64 upstreams",
      body: () => path({ upstreams: many(65, (i) => up(1000 + i)) }),
      errors: [["body.paths[1].upstreams", /at most 64 items/]],
    },
    dial("127.0.0.1 :80", /whitespace/),
    dial("127.0.0.1:80\n", /whitespace/),
    dial("localhost", /host:port/),
    dial("::1:80", /host:port/),
    dial("127.0.0.1:0", /port between 1 and 65535/),
    dial("127.0.0.1:65536", /port between 1 and 65535/),
    dial("[zz::1]:80", /invalid IPv6/),
    dial("*.a.test:80", /invalid host/),
    dial("a_b..test:80", /invalid host/),
    {
      name: "a weight without weighted_round_robin",
      body: () => path({ upstreams: [up(), { ...up(), weight: 2 }] }),
      errors: [["body.paths[1].upstreams[1].weight", /only allowed with strategy weighted_round_robin/]],
    },
    {
      name: "weights that sum to 0",
      body: () => path({ strategy: "weighted_round_robin", upstreams: [{ ...up(), weight: 0 }] }),
      errors: [["body.paths[1].upstreams", /weights must sum to more than 0/]],
    },
    {
      name: "a negative weight and an unknown strategy",
      body: () => path({ strategy: "random", upstreams: [{ ...up(), weight: -1 }] }),
      errors: [
        ["body.paths[1].upstreams[0].weight", /at least 0/],
        ["body.paths[1].strategy", /must be one of: first, weighted_round_robin/],
      ],
    },
    {
      name: "strip_prefix not a boolean",
      body: () => path({ upstreams: [up()], strip_prefix: "yes" }),
      errors: [["body.paths[1].strip_prefix", /must be a boolean/]],
    },
    {
      name: "every dial of a path named, besides the route's own",
      body: () => ({
        upstreams: [{ dial: "nope" }],
        paths: [
          { prefix: "/a", upstreams: [{ dial: "a:1" }, { dial: "bbb" }] },
          { prefix: "/b", upstreams: [{ dial: "c:0" }] },
        ],
      }),
      errors: [
        ["body.upstreams[0].dial", /host:port/],
        ["body.paths[0].upstreams[1].dial", /host:port/],
        ["body.paths[1].upstreams[0].dial", /port between/],
      ],
    },
  ]);
});

test("at the limits, redirect_from and paths are accepted and read back as sent", async () => {
  const request = {
    redirect_from: many(16, (i) => `r${i}.limits.test`),
    redirect_status: 301,
    paths: [
      { prefix: `/${"a".repeat(255)}`, upstreams: [up()] },
      { prefix: "/-._~!$&'()+,;=:@/X", upstreams: [up()], strip_prefix: true },
      { prefix: "/a.b/..c/.d/e..", upstreams: many(64, (i) => up(1000 + i)) },
      ...many(61, (i) => ({ prefix: `/p${i}`, upstreams: [up()] })),
    ],
  };
  const read = (await assertAccepted(await agent(), request)) as typeof request;
  assert.deepEqual(read.redirect_from, request.redirect_from);
  assert.equal(read.redirect_status, 301);
  const byPrefix = (paths: { prefix: string }[]) => paths.map((p) => p.prefix).sort();
  assert.deepEqual(byPrefix(read.paths), byPrefix(request.paths));
});
