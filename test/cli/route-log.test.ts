import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { startUpstream, viaProxy } from "../helpers/http.js";
import { waitFor } from "../helpers/wait.js";
import { CLI, problemLine, runCli, startCliAgent } from "./support.js";

type After = { after: (fn: () => unknown) => void };

function tempDir(t: After): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-cli-log-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** An agent whose access logs go to a folder of the test's, with one logging route made by `routes add --file`. */
async function loggingRoute(t: After) {
  const logs = tempDir(t);
  const agent = await startCliAgent(t, { HOSTKEEPER_ACCESS_LOG_DIR: logs });
  const up = await startUpstream(t, "logged");
  const file = join(tempDir(t), "request.json");
  const request = {
    domain: "log.cli.test",
    upstreams: [{ dial: `127.0.0.1:${up.port}` }],
    access_log: true,
    headers: { response: { set: { "x-from": "file" } } },
  };
  writeFileSync(file, JSON.stringify(request));
  const added = await runCli(["routes", "add", "--file", file], agent.env);
  assert.equal(added.code, 0, added.stderr);
  assert.match(added.stdout, /^id +log\.cli\.test$/m);
  return { agent, file };
}

describe("routes add --file and routes log, against a real agent and Caddy", () => {
  test("add --file sends the whole request, policies included; arguments beside it are refused", async (t) => {
    const { agent, file } = await loggingRoute(t);
    const request = await agent.call({ method: "GET", url: "/v1/proxy/routes/log.cli.test/request" });
    assert.equal(request.statusCode, 200, request.body);
    assert.deepEqual(request.json().headers, { response: { set: { "x-from": "file" } } });
    assert.equal(request.json().access_log, true);

    const both = await runCli(["routes", "add", "--file", file, "other.cli.test"], agent.env);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /--file takes the whole request/);
    const missing = await runCli(
      ["routes", "add", "--file", join(tmpdir(), "no-such-request.json")],
      agent.env,
    );
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /cannot read .*no-such-request\.json/);
    // The API's own refusal of a bad request, as for any other.
    const bad = join(tempDir(t), "bad.json");
    writeFileSync(bad, JSON.stringify({ domain: "bad.cli.test", upstreams: [] }));
    const refused = await runCli(["routes", "add", "--file", bad], agent.env);
    assert.equal(refused.code, 1);
    assert.equal(problemLine(refused.stderr).code, "validation_failed");
  });

  test("routes log prints the newest lines, one a request, and --json the entries", async (t) => {
    const { agent } = await loggingRoute(t);
    for (const path of ["/one", "/two?x=1", "/three"])
      assert.equal((await viaProxy(agent.caddy.httpPort, "log.cli.test", path)).status, 200);
    const printed = await waitFor("three lines", async () => {
      const r = await runCli(["routes", "log", "log.cli.test", "--lines", "2"], agent.env);
      return r.code === 0 && r.stdout.includes("/three") ? r.stdout : undefined;
    });
    const lines = printed.trimEnd().split("\n");
    assert.equal(lines.length, 2);
    assert.match(
      lines[0] ?? "",
      /^\d{4}-\d\d-\d\dT[\d:.]+Z 200 GET log\.cli\.test\/two\?x=1 [\d.]+ ms \d+ B 127\.0\.0\.1$/,
    );
    assert.match(lines[1] ?? "", / 200 GET log\.cli\.test\/three /);
    const json = await runCli(["routes", "log", "log.cli.test", "--json"], agent.env);
    assert.equal(json.code, 0, json.stderr);
    const entries = JSON.parse(json.stdout) as { request: { uri: string } }[];
    assert.deepEqual(
      entries.map((e) => e.request.uri),
      ["/one", "/two?x=1", "/three"],
    );
    const none = await runCli(["routes", "log", "nolog.cli.test"], agent.env);
    assert.equal(none.code, 1);
    assert.equal(problemLine(none.stderr).code, "route_not_found");
  });

  test("routes log --follow prints new requests as they come, each once, until Ctrl-C (exit 130)", async (t) => {
    const { agent } = await loggingRoute(t);
    assert.equal((await viaProxy(agent.caddy.httpPort, "log.cli.test", "/before")).status, 200);
    const config = join(tempDir(t), "config.json");
    writeFileSync(config, "{}");
    const child = spawn(process.execPath, [CLI, "routes", "log", "log.cli.test", "--follow"], {
      env: { PATH: process.env.PATH, HOSTKEEPER_CONFIG: config, ...agent.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    t.after(() => {
      if (child.pid !== undefined && child.exitCode === null) process.kill(child.pid, "SIGKILL");
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once("close", resolve));
    await waitFor("the first line", () => (out.includes("/before") ? true : undefined));
    for (const path of ["/live-1", "/live-2"])
      assert.equal((await viaProxy(agent.caddy.httpPort, "log.cli.test", path)).status, 200);
    await waitFor("the new lines", () => (out.includes("/live-2") ? true : undefined));
    process.kill(child.pid as number, "SIGINT");
    assert.equal(await exited, 130);
    const uris = out
      .trimEnd()
      .split("\n")
      .map((l) => l.split(" ")[3]);
    assert.deepEqual(uris, ["log.cli.test/before", "log.cli.test/live-1", "log.cli.test/live-2"]);
  });
});
