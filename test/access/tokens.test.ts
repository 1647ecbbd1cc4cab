import assert from "node:assert/strict";
import { chmodSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import type pino from "pino";
import { TokenRegistry } from "../../src/access/tokens.js";
import { AccessControl } from "../../src/http/auth.js";
import { FailureLimiter } from "../../src/http/rate-limit.js";
import { buildTestApp, TEST_TOKEN, type TestApp } from "../helpers/app.js";
import { capturedLogger } from "../helpers/logs.js";
import { waitFor } from "../helpers/wait.js";
import { type NamedToken, secretOf, sha256Hex, writeTokensFile } from "../http/support.js";

type After = { after: (fn: () => unknown) => void };

const token = (name: string, ...scopes: NamedToken["scopes"]): NamedToken => ({
  name,
  scopes,
  secret: secretOf(name),
});

/** A clock the test moves by hand. */
function manualClock(start = Date.parse("2026-11-23T10:00:00Z")) {
  let now = start;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

/** The agent without Caddy (nothing here reaches it); `GET /v1/openapi.json` answers any valid token. */
async function agent(
  t: After,
  env: Record<string, string>,
  opts: { now?: () => number; dataDir?: string } = {},
) {
  return buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9", ...env }, opts);
}

const statusWith = async (a: TestApp, secret: string, url = "/v1/openapi.json", remoteAddress?: string) =>
  (
    await a.app.inject({
      method: "GET",
      url,
      headers: { authorization: `Bearer ${secret}` },
      ...(remoteAddress ? { remoteAddress } : {}),
    })
  ).statusCode;

/** The registry alone: the test's token as the agent's own, and `file` as the tokens file. */
const registryOf = (file: string | undefined, log: pino.Logger) =>
  new TokenRegistry({
    own: { secret: TEST_TOKEN, path: undefined },
    tokensFile: file,
    overlapMs: 0,
    now: Date.now,
    log,
  });

describe("the tokens file", () => {
  test("is read again when it changes, replaced by rename or written in place, without a restart", async (t) => {
    const ci = token("ci", "proxy:read");
    const newcomer = token("newcomer", "system:read");
    const file = writeTokensFile(t, [ci]);
    const a = await agent(t, { HOSTKEEPER_TOKENS_FILE: file, HOSTKEEPER_AUTH_FAILURE_BURST: "100000" });
    assert.equal(await statusWith(a, ci.secret), 200);
    assert.equal(await statusWith(a, newcomer.secret), 401);

    // Replaced the way tools do it: a new file renamed over the old one.
    const tmp = join(dirname(file), "tokens.json.new");
    writeTokensFile(t, [ci, newcomer], tmp);
    renameSync(tmp, file);
    await waitFor("the new token to be accepted", async () =>
      (await statusWith(a, newcomer.secret)) === 200 ? true : undefined,
    );
    // Written in place: ci goes.
    writeTokensFile(t, [newcomer], file);
    await waitFor("the removed token to be refused", async () =>
      (await statusWith(a, ci.secret)) === 401 ? true : undefined,
    );
    assert.equal(await statusWith(a, newcomer.secret), 200);
    // Removed: every token of the file is withdrawn; the agent's own stays.
    rmSync(file);
    await waitFor("the file's tokens to be withdrawn", async () =>
      (await statusWith(a, newcomer.secret)) === 401 ? true : undefined,
    );
    assert.equal(await statusWith(a, TEST_TOKEN), 200);
  });

  test("a broken file keeps the tokens loaded before, and says so in the log once", async (t) => {
    const ci = token("ci", "proxy:read");
    const file = writeTokensFile(t, [ci]);
    const { log, lines } = capturedLogger("debug");
    const registry = registryOf(file, log);
    t.after(() => registry.close());
    const broken = [
      "{not json",
      JSON.stringify({ tokens: [{ name: "ci", sha256: "abc", scopes: ["proxy:read"] }] }),
      JSON.stringify({ tokens: [{ name: "ci", sha256: sha256Hex("x"), scopes: ["proxy:everything"] }] }),
      JSON.stringify({ tokens: [{ name: "default", sha256: sha256Hex("x"), scopes: ["*"] }] }),
      JSON.stringify({ keys: [] }),
    ];
    for (const [i, text] of broken.entries()) {
      writeFileSync(file, text);
      registry.reloadIfChanged();
      registry.reloadIfChanged();
      assert.equal(registry.authenticate(`Bearer ${ci.secret}`)?.name, "ci", text);
      const errors = lines.filter((l) => JSON.parse(l).level === 50);
      assert.equal(errors.length, i + 1, `one error line per broken version: ${lines.join("\n")}`);
      const last = JSON.parse(errors.at(-1) as string);
      assert.equal(last.path, file);
      assert.equal(last.kept, 1);
    }
    // A file others may write is loaded, with a warning.
    writeTokensFile(t, [ci], file);
    chmodSync(file, 0o666);
    registry.reloadIfChanged();
    assert.ok(
      lines.some((l) => JSON.parse(l).level === 40 && JSON.parse(l).mode === "666"),
      lines.join("\n"),
    );
    // Nothing of a token's secret or hash reaches the log.
    assert.ok(!lines.some((l) => l.includes(ci.secret) || l.includes(sha256Hex(ci.secret))));
  });

  test("a file that cannot be used at start stops the start, naming the setting", async (t) => {
    const file = writeTokensFile(t, []);
    writeFileSync(file, '{"tokens": [{"name": "ci"}]}');
    await assert.rejects(agent(t, { HOSTKEEPER_TOKENS_FILE: file }), /HOSTKEEPER_TOKENS_FILE .*sha256/);
    await assert.rejects(
      agent(t, { HOSTKEEPER_TOKENS_FILE: join(dirname(file), "missing.json") }),
      /HOSTKEEPER_TOKENS_FILE .*ENOENT/,
    );
  });

  test("old secrets past their not_after no longer authenticate; unknown keys are allowed", async (t) => {
    const clock = manualClock();
    const file = writeTokensFile(t, []);
    writeFileSync(
      file,
      JSON.stringify({
        written_by: "platform-tool",
        tokens: [
          {
            name: "ci",
            sha256: sha256Hex("old-secret-0123456789"),
            scopes: ["*"],
            not_after: "2026-11-23T10:00:01Z",
          },
          { name: "ci", sha256: sha256Hex(secretOf("ci")), scopes: ["*"], comment: "rotated by hand" },
        ],
      }),
    );
    const a = await agent(t, { HOSTKEEPER_TOKENS_FILE: file }, { now: clock.now });
    assert.equal(await statusWith(a, "old-secret-0123456789"), 200);
    clock.advance(1000);
    assert.equal(await statusWith(a, "old-secret-0123456789"), 401);
    assert.equal(await statusWith(a, secretOf("ci")), 200);
  });
});

describe("rotation", () => {
  test("a named token gets a new secret; the old one works for the overlap, then not", async (t) => {
    const clock = manualClock();
    const file = writeTokensFile(t, [token("ci", "proxy:read"), token("admin", "*")]);
    // Keys other tools wrote stay as they are.
    const original = JSON.parse(readFileSync(file, "utf8"));
    original.generated_by = "platform";
    original.tokens[0].owner = "ci team";
    writeFileSync(file, JSON.stringify(original));
    const a = await agent(
      t,
      { HOSTKEEPER_TOKENS_FILE: file, HOSTKEEPER_TOKEN_ROTATION_OVERLAP_SECONDS: "60" },
      { now: clock.now },
    );
    const res = await a.call({
      method: "POST",
      url: "/v1/tokens/ci/rotate",
      headers: { authorization: `Bearer ${secretOf("admin")}` },
    });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json() as { name: string; token: string; previous_valid_until: string };
    assert.equal(body.name, "ci");
    assert.equal(body.previous_valid_until, new Date(clock.now() + 60_000).toISOString());
    assert.notEqual(body.token, secretOf("ci"));
    assert.ok(body.token.length >= 40);

    const stored = JSON.parse(readFileSync(file, "utf8"));
    assert.equal(stored.generated_by, "platform");
    const ci = stored.tokens.filter((e: { name: string }) => e.name === "ci");
    assert.deepEqual(ci, [
      { name: "ci", sha256: sha256Hex(body.token), scopes: ["proxy:read"], owner: "ci team" },
      {
        name: "ci",
        sha256: sha256Hex(secretOf("ci")),
        scopes: ["proxy:read"],
        owner: "ci team",
        not_after: body.previous_valid_until,
      },
    ]);
    assert.ok(!readFileSync(file, "utf8").includes(body.token), "the file holds no secret");

    // The new secret has the old one's scopes, no more.
    // (Past the token and its scope; no Caddy answers here, so 503.)
    assert.equal(await statusWith(a, body.token, "/v1/proxy/routes"), 503);
    assert.equal(await statusWith(a, body.token, "/v1/status"), 403);
    assert.equal(await statusWith(a, secretOf("ci")), 200);
    clock.advance(59_999);
    assert.equal(await statusWith(a, secretOf("ci")), 200);
    clock.advance(1);
    assert.equal(await statusWith(a, secretOf("ci")), 401);
    assert.equal(await statusWith(a, body.token), 200);

    // The next rotation drops the expired entry.
    const again = await a.call({
      method: "POST",
      url: "/v1/tokens/ci/rotate",
      headers: { authorization: `Bearer ${secretOf("admin")}` },
    });
    assert.equal(again.statusCode, 200);
    const after = JSON.parse(readFileSync(file, "utf8")).tokens.filter(
      (e: { name: string }) => e.name === "ci",
    );
    assert.equal(after.length, 2);
    assert.ok(!after.some((e: { sha256: string }) => e.sha256 === sha256Hex(secretOf("ci"))));
  });

  test("needs a token with every scope; an unknown name is 404; HOSTKEEPER_TOKEN is configuration (409)", async (t) => {
    const file = writeTokensFile(t, [token("ci", "proxy:read", "proxy:write", "system:write")]);
    const a = await agent(t, { HOSTKEEPER_TOKENS_FILE: file });
    let res = await a.call({
      method: "POST",
      url: "/v1/tokens/ci/rotate",
      headers: { authorization: `Bearer ${secretOf("ci")}` },
    });
    assert.equal(res.statusCode, 403);
    assert.equal(res.json().code, "insufficient_scope");
    assert.deepEqual(res.json().required_scopes, ["*"]);
    res = await a.call({ method: "POST", url: "/v1/tokens/nobody/rotate" });
    assert.equal(res.statusCode, 404);
    assert.equal(res.json().code, "token_not_found");
    res = await a.call({ method: "POST", url: "/v1/tokens/default/rotate" });
    assert.equal(res.statusCode, 409);
    assert.equal(res.json().code, "token_not_rotatable");
    assert.match(res.json().detail, /HOSTKEEPER_TOKEN/);
    assert.equal(await statusWith(a, TEST_TOKEN), 200);
  });

  test("the generated token rotates in <data dir>/token; its old secret survives a restart for the overlap", async (t) => {
    const clock = manualClock();
    const env = { HOSTKEEPER_TOKEN: "", HOSTKEEPER_TOKEN_ROTATION_OVERLAP_SECONDS: "30" };
    const first = await agent(t, env, { now: clock.now });
    const tokenFile = join(first.dataDir, "token");
    const old = readFileSync(tokenFile, "utf8").trim();
    const res = await first.app.inject({
      method: "POST",
      url: "/v1/tokens/default/rotate",
      headers: { authorization: `Bearer ${old}` },
    });
    assert.equal(res.statusCode, 200, res.body);
    const fresh = (res.json() as { token: string }).token;
    assert.equal(readFileSync(tokenFile, "utf8").trim(), fresh);
    assert.equal(await statusWith(first, fresh), 200);
    assert.equal(await statusWith(first, old), 200);
    await first.app.close();

    const second = await agent(t, env, { now: clock.now, dataDir: first.dataDir });
    assert.equal(await statusWith(second, fresh), 200);
    assert.equal(await statusWith(second, old), 200);
    clock.advance(30_000);
    assert.equal(await statusWith(second, old), 401);
    assert.equal(await statusWith(second, fresh), 200);
  });
});

describe("failed authentications are rate-limited per source address", () => {
  test("after the burst a failure is 429 with Retry-After; a valid token still passes; the bucket refills", async (t) => {
    const clock = manualClock();
    const a = await agent(
      t,
      { HOSTKEEPER_AUTH_FAILURE_BURST: "3", HOSTKEEPER_AUTH_FAILURES_PER_MINUTE: "6" },
      { now: clock.now },
    );
    const bad = (remoteAddress = "192.0.2.7") =>
      a.app.inject({
        method: "GET",
        url: "/v1/status",
        headers: { authorization: "Bearer wrong-token-0123456789" },
        remoteAddress,
      });
    for (let i = 0; i < 3; i++) assert.equal((await bad()).statusCode, 401);
    const limited = await bad();
    assert.equal(limited.statusCode, 429);
    assert.match(limited.headers["content-type"] as string, /^application\/problem\+json/);
    assert.equal(limited.headers["retry-after"], "10");
    assert.equal(limited.json().code, "too_many_failed_authentications");
    assert.equal(limited.json().retry_after_seconds, 10);
    // A remote address past its budget is refused before its token is compared: guessing runs at the
    // refill rate, and a right guess meanwhile is refused too.
    assert.equal(await statusWith(a, TEST_TOKEN, "/v1/openapi.json", "192.0.2.7"), 429);
    // Another address has its own budget.
    assert.equal((await bad("192.0.2.8")).statusCode, 401);
    // A request without any token counts the same.
    const none = await a.app.inject({ method: "GET", url: "/v1/status", remoteAddress: "192.0.2.7" });
    assert.equal(none.statusCode, 429);
    clock.advance(9_999);
    assert.equal((await bad()).statusCode, 429);
    clock.advance(1);
    // Refused requests did not prolong the wait: one failure's worth has refilled.
    assert.equal(await statusWith(a, TEST_TOKEN, "/v1/openapi.json", "192.0.2.7"), 200);
    assert.equal((await bad()).statusCode, 401);
    assert.equal((await bad()).statusCode, 429);
  });

  test("on the loopback a valid token still gets in past the budget, so bad tokens cannot lock the CLI out", async (t) => {
    const a = await agent(t, {
      HOSTKEEPER_AUTH_FAILURE_BURST: "1",
      HOSTKEEPER_AUTH_FAILURES_PER_MINUTE: "1",
    });
    for (const address of ["127.0.0.1", "::1", "::ffff:127.0.0.1"]) {
      const bad = () =>
        a.app.inject({
          method: "GET",
          url: "/v1/status",
          headers: { authorization: "Bearer wrong-token-0123456789" },
          remoteAddress: address,
        });
      assert.equal((await bad()).statusCode, 401);
      assert.equal((await bad()).statusCode, 429);
      assert.equal(await statusWith(a, TEST_TOKEN, "/v1/openapi.json", address), 200);
    }
  });

  test("failures are logged with the address and reason, never the presented secret", () => {
    const { log, lines } = capturedLogger("debug");
    const registry = registryOf(undefined, log);
    const access = new AccessControl(
      registry,
      new FailureLimiter({ burst: 1, perMinute: 1, now: Date.now }),
      log,
    );
    const presented = "guessed-secret-value-0123456789";
    assert.equal(access.check(`Bearer ${presented}`, "198.51.100.1")?.code, "unauthorized");
    assert.equal(
      access.check(`Bearer ${presented}`, "198.51.100.1")?.code,
      "too_many_failed_authentications",
    );
    assert.equal(
      access.check(`Bearer ${TEST_TOKEN}`, "198.51.100.1")?.code,
      "too_many_failed_authentications",
    );
    assert.equal(lines.length, 3, lines.join("\n"));
    const first = JSON.parse(lines[0] as string);
    assert.equal(first.remote_address, "198.51.100.1");
    assert.equal(first.reason, "the bearer token is not valid");
    assert.ok(!lines.some((l) => l.includes(presented) || l.includes(TEST_TOKEN)), lines.join("\n"));
  });

  test("the limiter's memory is bounded: the address used longest ago is forgotten first", () => {
    const limiter = new FailureLimiter({ burst: 1, perMinute: 1, now: () => 0, maxAddresses: 100 });
    assert.equal(limiter.fail("203.0.113.1"), undefined);
    assert.equal(limiter.fail("203.0.113.1"), 60);
    for (let i = 0; i < 10_000; i++) limiter.fail(`10.0.${i >> 8}.${i & 255}`);
    assert.equal(limiter.size, 100);
    // Forgotten: a full budget again, never a harsher one.
    assert.equal(limiter.fail("203.0.113.1"), undefined);
  });
});
