import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { RouteJson } from "../../src/caddy/routes/plan.js";
import { isDecoyRoute, knownUsersPattern } from "../../src/proxy/route/basic-auth.js";
import { buildRoute } from "../../src/proxy/route/build-route.js";
import { withStreamCloseDelay } from "../../src/proxy/route/streams.js";
import { canonicalJson } from "../../src/util/canonical-json.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { basic, bcryptHash, recordingUpstream, send } from "./policy-support.js";
import { setup } from "./support.js";

/*
 * basic_auth tells no one which usernames exist (issue 34): an unknown user costs Caddy what a known
 * user's wrong password does, before and after Caddy's hash cache has seen the password. The timing tests
 * are the issue's own comparison: medians of interleaved tries through a real Caddy, within 1.5x.
 */

const dial = (port: number) => [{ dial: `127.0.0.1:${port}` }];
const header = (user: string, password: string, scheme = "Basic") =>
  `${scheme} ${Buffer.from(`${user}:${password}`).toString("base64")}`;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const ratio = (a: number, b: number) => Math.max(a, b) / Math.min(a, b);

const username = fc
  .string({ unit: "binary", minLength: 1, maxLength: 40 })
  .filter((u) => !u.includes(":") && !/\p{Cc}/u.test(u));

describe("the pattern of the known users' Authorization", () => {
  test("matches a known user's credentials in any case of the scheme, whatever the password", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(username, { minLength: 1, maxLength: 5 }),
        fc.nat(),
        fc.string({ unit: "binary", maxLength: 30 }),
        fc.constantFrom("Basic", "basic", "BASIC", "bAsIc"),
        (users, pick, password, scheme) => {
          const user = users[pick % users.length] ?? "";
          assert.match(header(user, password, scheme), new RegExp(knownUsersPattern(users)));
        },
      ),
      { numRuns: 2000 },
    );
  });

  test("matches no other username, whatever the password (a known name as its prefix included)", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(username, { minLength: 1, maxLength: 5 }),
        username,
        fc.string({ unit: "binary", maxLength: 30 }),
        fc.boolean(),
        (users, other, password, extend) => {
          const user = extend ? `${users[0]}${other}` : other;
          fc.pre(!users.includes(user));
          assert.doesNotMatch(header(user, password), new RegExp(knownUsersPattern(users)));
        },
      ),
      { numRuns: 2000 },
    );
  });

  test("takes the bits Go's decoder ignores at the end in any form (an empty password)", () => {
    for (const user of ["a", "ab", "abc", "ü", "üü"]) {
      const text = Buffer.from(`${user}:`).toString("base64");
      const data = text.replace(/=+$/, "");
      for (const last of "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") {
        const odd = `${data.slice(0, -1)}${last}${text.slice(data.length)}`;
        if (Buffer.from(odd, "base64").toString() !== `${user}:`) continue;
        assert.match(`Basic ${odd}`, new RegExp(knownUsersPattern([user])), odd);
      }
    }
  });

  test("refuses two Authorization values (Caddy's placeholder joins them with a comma) and other schemes", () => {
    const p = new RegExp(knownUsersPattern(["ana"]));
    assert.doesNotMatch(`${header("ana", "x")},${header("ana", "y")}`, p);
    assert.doesNotMatch(`${header("bob", "x")},${header("ana", "y")}`, p);
    assert.doesNotMatch(`Basic  ${header("ana", "x").slice(6)}`, p);
    assert.doesNotMatch(`Bearer ${header("ana", "x").slice(6)}`, p);
    assert.doesNotMatch("", p);
  });
});

test("basic_auth through Caddy: every kind of username signs in, in any case of the scheme; unknown users, two headers and no credentials get the realm's 401", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await recordingUpstream(t, "in");
  // `<name>:` of 0, 1 and 2 bytes past a multiple of 3, non-ASCII, Caddy's placeholder syntax.
  const names = ["ab", "abc", "abcd", "ünï", "{env.HOME}", "a b+/="];
  const hash = bcryptHash("pw:x");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: {
      domain: "who.test",
      upstreams: dial(up.port),
      basic_auth: { realm: "R", users: names.map((username) => ({ username, password_hash: hash })) },
    },
  });
  assert.equal(res.statusCode, 201, res.body);
  for (const name of names)
    for (const scheme of ["Basic", "bASIC"]) {
      const r = await send(caddy.httpPort, "who.test", {
        headers: { authorization: header(name, "pw:x", scheme) },
      });
      assert.equal(r.status, 200, `${name} ${scheme}`);
    }
  const hits = up.seen.length;
  const refused: Record<string, string | string[]>[] = [
    basic("ab", "pw"),
    basic("abcde", "pw:x"),
    basic("a", "bc:pw:x"),
    basic("abc", "pw:X"),
    // The decoy's own name: it too is no user.
    basic("\u0000hkdecoy", "pw:x"),
    { authorization: [header("ab", "pw:x"), header("abc", "pw:x")] },
    { authorization: [header("zz", "pw:x"), header("abc", "pw:x")] },
    { authorization: "Bearer x" },
    {},
  ];
  for (const headers of refused) {
    const r = await send(caddy.httpPort, "who.test", { headers });
    assert.equal(r.status, 401, JSON.stringify(headers));
    assert.equal(r.headers["www-authenticate"], 'Basic realm="R"', JSON.stringify(headers));
  }
  assert.equal(up.seen.length, hits);
});

/**
 * A route of two users written through the agent, and a function that times one refused request. Cost 8
 * (about 20 ms a check here): the hash, not the loopback round trip, is what a try costs, and the cost is
 * far below the one of Caddy's own hash for unknown users (14).
 */
async function timedRoute(t: Parameters<typeof setup>[0]) {
  const { caddy, call } = await setup(t);
  const up = await recordingUpstream(t, "in");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: {
      domain: "time.test",
      upstreams: dial(up.port),
      basic_auth: {
        users: ["ana", "ben"].map((username) => ({ username, password_hash: bcryptHash("s3cret", 8) })),
      },
    },
  });
  assert.equal(res.statusCode, 201, res.body);
  const timed = async (authorization: string | string[]) => {
    const start = process.hrtime.bigint();
    const r = await send(caddy.httpPort, "time.test", { headers: { authorization } });
    assert.equal(r.status, 401);
    return Number(process.hrtime.bigint() - start) / 1e6;
  };
  // The route's check is real: the right password passes.
  assert.equal((await send(caddy.httpPort, "time.test", { headers: basic("ana", "s3cret") })).status, 200);
  return timed;
}

test("an unknown user and a known user's wrong password cannot be told apart by time: medians of 20 interleaved tries within 1.5x", async (t) => {
  const timed = await timedRoute(t);
  const known: number[] = [];
  const unknown: number[] = [];
  const twoHeaders: number[] = [];
  // Every try a new password (and name): Caddy's cache answers a pair it has seen at once, for both.
  for (let i = 0; i < 20; i++) {
    const tries: [number[], string | string[]][] = [
      [known, header(i % 2 ? "ana" : "ben", `wrong-${i}`)],
      [unknown, header(`nobody-${i}`, `wrong-${i}`)],
      [twoHeaders, [header(`nobody-2-${i}`, `x-${i}`), header("ana", `x-${i}`)]],
    ];
    // Interleaved, each first in turn: a machine busy for a while slows every kind alike.
    for (let k = 0; k < tries.length; k++) {
      const [into, authorization] = tries[(i + k) % tries.length] ?? [known, ""];
      into.push(await timed(authorization));
    }
  }
  const figures = `known ${median(known).toFixed(1)} ms, unknown ${median(unknown).toFixed(1)} ms, two headers ${median(twoHeaders).toFixed(1)} ms`;
  t.diagnostic(figures);
  assert.ok(ratio(median(known), median(unknown)) <= 1.5, figures);
  assert.ok(ratio(median(known), median(twoHeaders)) <= 1.5, figures);
});

test("after one unknown user with a password, another unknown user with it still costs what a known user's does (Caddy's cache keys unknown users by password alone)", async (t) => {
  const timed = await timedRoute(t);
  const known: number[] = [];
  const unknown: number[] = [];
  for (let i = 0; i < 20; i++) {
    await timed(header(`first-${i}`, `pw-${i}`));
    const pair: [number[], string][] = [
      [unknown, header(`second-${i}`, `pw-${i}`)],
      [known, header("ana", `pw-${i}`)],
    ];
    if (i % 2) pair.reverse();
    for (const [into, authorization] of pair) into.push(await timed(authorization));
  }
  const figures = `known ${median(known).toFixed(1)} ms, unknown after another ${median(unknown).toFixed(1)} ms`;
  t.diagnostic(figures);
  assert.ok(ratio(median(known), median(unknown)) <= 1.5, figures);
});

/** A route with `basic_auth` as an earlier version wrote it: without the decoy route and account. */
function earlierRoute(domain: string, hashes: string[]): RouteJson {
  const users = hashes.map((password_hash, i) => ({ username: `u${i}`, password_hash }));
  const { route } = buildRoute({
    domain,
    upstreams: [{ dial: "127.0.0.1:9" }],
    basic_auth: { users: users.map((u) => ({ ...u, password_hash: hashes[0] ?? "" })) },
  });
  const sub = (route.handle ?? [])[0] as { routes: RouteJson[] };
  const routes = sub.routes.filter((r) => !isDecoyRoute(r));
  const auth = routes[0]?.handle?.[0] as { providers: { http_basic: { accounts: unknown[] } } };
  auth.providers.http_basic.accounts = users.map((u) => ({
    username: u.username,
    password: u.password_hash,
  }));
  return { ...route, handle: [{ handler: "subroute", routes }] };
}

test("at start the agent gives the basic_auth routes an earlier version wrote their decoy; a hand-written one and one of users of two costs stay as they are", {
  timeout: 60_000,
}, async (t) => {
  const caddy = await startCaddy(t);
  const hash = bcryptHash("s3cret", 8);
  const earlier = earlierRoute("earlier.test", [hash, hash]);
  const twoCosts = earlierRoute("two-costs.test", [hash, bcryptHash("s3cret", 4)]);
  const hand = {
    "@id": "hand.test",
    match: [{ host: ["hand.test"] }],
    handle: [
      {
        handler: "authentication",
        providers: { http_basic: { accounts: [{ username: "x", password: hash }] } },
      },
      { handler: "static_response", body: "in" },
    ],
    terminal: true,
  };
  const routesPath = "/config/apps/http/servers/srv0/routes";
  await caddy.admin.write("PATCH", routesPath, [earlier, twoCosts, hand]);
  const { app, call } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  await app.services.writer.whenIdle();

  const [now, twoCostsNow, handNow] = JSON.parse((await caddy.admin.read(routesPath)).text) as RouteJson[];
  const bare = (r: RouteJson | undefined) => canonicalJson(r && withStreamCloseDelay(r, 0));
  assert.equal(
    bare(now),
    bare(
      buildRoute({
        domain: "earlier.test",
        upstreams: [{ dial: "127.0.0.1:9" }],
        basic_auth: {
          users: [
            { username: "u0", password_hash: hash },
            { username: "u1", password_hash: hash },
          ],
        },
      }).route,
    ),
  );
  const res = await call({ method: "GET", url: "/v1/proxy/routes/earlier.test/request" });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(bare(twoCostsNow), bare(twoCosts));
  assert.equal(bare(handNow), bare(hand));
  assert.equal(
    (await send(caddy.httpPort, "earlier.test", { headers: basic("nobody", "s3cret") })).status,
    401,
  );
  const signedIn = await send(caddy.httpPort, "hand.test", { headers: basic("x", "s3cret") });
  assert.equal(signedIn.body.toString(), "in");
});
