import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { TEST_TOKEN } from "../helpers/app.js";
import { startUpstream, viaProxy } from "../helpers/http.js";
import { problemLine, runCli, startCliAgent } from "./support.js";

describe("routes against a real agent and Caddy", () => {
  test("add, list, get and rm: the route carries traffic while it exists", async (t) => {
    const agent = await startCliAgent(t);
    const up = await startUpstream(t, "shop-upstream");
    const cli = (...args: string[]) => runCli(args, agent.env);

    const added = await cli("routes", "add", "Shop.CLI.test.", `127.0.0.1:${up.port}`);
    assert.equal(added.code, 0, added.stderr);
    assert.match(added.stdout, /^id +shop\.cli\.test$/m);
    assert.match(added.stdout, new RegExp(`^upstreams +127\\.0\\.0\\.1:${up.port}$`, "m"));
    assert.match(added.stdout, /^policy +first$/m);
    assert.match(added.stdout, /^terminal +yes$/m);
    assert.deepEqual(await viaProxy(agent.caddy.httpPort, "shop.cli.test"), {
      status: 200,
      body: "shop-upstream",
    });

    const listed = await cli("routes", "list");
    assert.equal(listed.code, 0, listed.stderr);
    const [header, row, ...rest] = listed.stdout.split("\n");
    assert.match(header ?? "", /^ID +HOSTS +UPSTREAMS +POLICY +TERMINAL$/);
    assert.match(
      row ?? "",
      new RegExp(`^shop\\.cli\\.test +shop\\.cli\\.test +127\\.0\\.0\\.1:${up.port} +first +yes$`),
    );
    assert.deepEqual(rest, [""]);
    // Aligned columns: every column starts where its header does.
    assert.equal(row?.indexOf("127.0.0.1"), header?.indexOf("UPSTREAMS"));

    const got = await cli("routes", "get", "shop.cli.test");
    assert.equal(got.code, 0, got.stderr);
    assert.equal(got.stdout, added.stdout);

    const removed = await cli("routes", "rm", "shop.cli.test");
    assert.equal(removed.code, 0, removed.stderr);
    assert.equal(removed.stdout, "deleted route shop.cli.test\n");
    assert.notEqual((await viaProxy(agent.caddy.httpPort, "shop.cli.test")).body, "shop-upstream");
    assert.equal((await cli("routes", "list")).stdout, "no routes\n");
  });

  test("add takes weights, the strategy, --no-terminal and a callback URL", async (t) => {
    const agent = await startCliAgent(t);
    const a = await startUpstream(t, "a");
    const b = await startUpstream(t, "b");
    const r = await runCli(
      [
        "routes",
        "add",
        "weighted.cli.test",
        `127.0.0.1:${a.port}=3`,
        `127.0.0.1:${b.port}=1`,
        "--strategy=weighted_round_robin",
        "--no-terminal",
        "--callback-url",
        "http://127.0.0.1:9/hook",
        "--json",
      ],
      agent.env,
    );
    assert.equal(r.code, 0, r.stderr);
    const route = JSON.parse(r.stdout);
    assert.equal(route["@id"], "weighted.cli.test");
    assert.equal(route.terminal, false);
    assert.deepEqual(route.handle[0].load_balancing.selection_policy, {
      policy: "weighted_round_robin",
      weights: [3, 1],
    });
    const listed = await runCli(["routes", "list"], agent.env);
    assert.match(
      listed.stdout,
      new RegExp(`127\\.0\\.0\\.1:${a.port}=3 127\\.0\\.0\\.1:${b.port}=1 +weighted_round_robin +no$`, "m"),
    );
    const seen = new Set<string>();
    for (let i = 0; i < 8; i++) seen.add((await viaProxy(agent.caddy.httpPort, "weighted.cli.test")).body);
    assert.deepEqual([...seen].sort(), ["a", "b"]);
  });

  test("--json prints the API's JSON as it came", async (t) => {
    const agent = await startCliAgent(t);
    const up = await startUpstream(t, "j");
    assert.equal((await runCli(["routes", "add", "j.cli.test", `127.0.0.1:${up.port}`], agent.env)).code, 0);
    const api = await agent.call({ method: "GET", url: "/v1/proxy/routes" });
    const listed = await runCli(["routes", "list", "--json"], agent.env);
    assert.equal(listed.code, 0, listed.stderr);
    assert.equal(listed.stdout.trimEnd(), api.body.trimEnd());
    const got = await runCli(["routes", "get", "j.cli.test", "--json"], agent.env);
    assert.deepEqual(JSON.parse(got.stdout), JSON.parse(api.body)[0]);
    const removed = await runCli(["routes", "rm", "j.cli.test", "--json"], agent.env);
    assert.equal(removed.code, 0, removed.stderr);
    assert.equal(removed.stdout, "", "204 has no body to print");
  });
});

describe("the API's problems: one line, exit 1", () => {
  test("adding an existing route", async (t) => {
    const agent = await startCliAgent(t);
    const args = ["routes", "add", "dup.cli.test", "127.0.0.1:9"];
    assert.equal((await runCli(args, agent.env)).code, 0);
    const r = await runCli(args, agent.env);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, "");
    const p = problemLine(r.stderr);
    assert.equal(p.status, 409);
    assert.equal(p.code, "route_exists");
    assert.match(p.detail, /dup\.cli\.test/);
  });

  test("with --json the problem body goes to stdout, the line to stderr", async (t) => {
    const agent = await startCliAgent(t);
    const args = ["routes", "add", "dup.cli.test", "127.0.0.1:9", "--json"];
    assert.equal((await runCli(args, agent.env)).code, 0);
    const r = await runCli(args, agent.env);
    assert.equal(r.code, 1);
    const body = JSON.parse(r.stdout);
    assert.equal(body.code, "route_exists");
    assert.equal(body.type, "urn:hostkeeper:problem:route_exists");
    assert.equal(problemLine(r.stderr).detail, body.detail);
  });

  test("a validation failure names each bad field in the one line", async (t) => {
    const agent = await startCliAgent(t);
    const r = await runCli(["routes", "add", "bad.cli.test", "127.0.0.1:99999", "nohost"], agent.env);
    assert.equal(r.code, 1);
    const p = problemLine(r.stderr);
    assert.equal(p.code, "validation_failed");
    assert.match(p.detail, /body\.upstreams\[0\]\.dial .*; body\.upstreams\[1\]\.dial /);
  });

  test("get and rm of an unknown route are 404 route_not_found", async (t) => {
    const agent = await startCliAgent(t);
    for (const verb of ["get", "rm"]) {
      const r = await runCli(["routes", verb, "none.cli.test"], agent.env);
      assert.equal(r.code, 1, verb);
      const p = problemLine(r.stderr);
      assert.equal(p.status, 404, verb);
      assert.equal(p.code, "route_not_found", verb);
      assert.equal(p.detail, "the managed server has no route with @id none.cli.test", verb);
    }
  });

  test("a wrong token is 401 unauthorized", async (t) => {
    const agent = await startCliAgent(t);
    const r = await runCli(["routes", "list"], {
      ...agent.env,
      HOSTKEEPER_TOKEN: "not-the-token-0123456789",
    });
    assert.equal(r.code, 1);
    assert.equal(problemLine(r.stderr).code, "unauthorized");
  });
});

describe("finding the agent and its token as the agent does", () => {
  test("the token from <data dir>/token when HOSTKEEPER_TOKEN is unset", async (t) => {
    const agent = await startCliAgent(t);
    writeFileSync(join(agent.dataDir, "token"), `${TEST_TOKEN}\n`, { mode: 0o600 });
    const { HOSTKEEPER_TOKEN: _, ...env } = agent.env;
    const r = await runCli(["routes", "list"], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "no routes\n");
  });

  test("the listen address and token from the config file", async (t) => {
    const agent = await startCliAgent(t);
    const dir = mkdtempSync(join(tmpdir(), "hk-cli-cfg-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, "config.json");
    writeFileSync(file, JSON.stringify({ listen: `127.0.0.1:${agent.port}`, token: TEST_TOKEN }));
    const r = await runCli(["routes", "list"], { HOSTKEEPER_CONFIG: file, HOSTKEEPER_DATA_DIR: dir });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(existsSync(join(dir, "token")), false, "the CLI never creates a token");
  });

  test("a wildcard listen address means the loopback", async (t) => {
    const agent = await startCliAgent(t);
    const r = await runCli(["routes", "list"], { ...agent.env, HOSTKEEPER_LISTEN: `0.0.0.0:${agent.port}` });
    assert.equal(r.code, 0, r.stderr);
  });
});
