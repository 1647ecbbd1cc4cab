/**
 * `hostkeeper agent update`: against a real agent outside the packaged service (it refuses, and the CLI says
 * so), and, for following an update to its end, against a real HTTP server on the loopback that answers a
 * scripted sequence of statuses and stops listening for a while, as the agent does while it restarts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import type { AgentUpdateState, AgentUpdateStatus } from "../../src/agent-update/schemas.js";
import { freePort } from "../../support/loopback.js";
import { TEST_TOKEN } from "../helpers/app.js";
import { minisignKeypair } from "../helpers/minisign.js";
import { waitFor } from "../helpers/wait.js";
import { problemLine, runCli, runInTerminal, startCli, startCliAgent } from "./support.js";

const ID = "au_0123456789abcdef";
const CREATED = "2026-03-02T10:00:00.000Z";

/** A whole status record, as GET /v1/agent/update/{id} answers it. */
function statusOf(state: AgentUpdateState, more: Partial<AgentUpdateStatus> = {}): AgentUpdateStatus {
  const final = ["completed", "rolled_back", "failed"].includes(state);
  return {
    id: ID,
    state,
    from_version: "0.1.0",
    to_version: "0.1.1",
    package_url: "https://releases.example.test/0.1.1/hostkeeper_0.1.1_amd64.deb",
    package_format: "deb",
    architecture: "amd64",
    progress: { bytes_downloaded: 0, bytes_total: 40_100_000 },
    signature: null,
    error: null,
    history: [{ state: "downloading", at: CREATED }],
    created_at: CREATED,
    updated_at: CREATED,
    finished_at: final ? "2026-03-02T10:00:41.200Z" : null,
    links: { status: `/v1/agent/update/${ID}` },
    ...more,
  };
}

const downloaded = (bytes: number) => ({ progress: { bytes_downloaded: bytes, bytes_total: 40_100_000 } });

/** A step of the script: the status to answer, and how long to stop listening after answering it. */
interface Step {
  status?: AgentUpdateStatus;
  /** A problem to answer instead: status and code. */
  problem?: [number, string];
  downMs?: number;
}

interface Scripted {
  env: Record<string, string>;
  port: number;
  /** The requests it got: method, path, authorization, and the JSON body of a POST. */
  requests: { method: string; url: string; authorization?: string; body?: unknown }[];
}

/**
 * A stand-in for the agent on a fixed loopback port: POST /v1/agent/update answers 202 with `accepted`,
 * each GET of the update's status the next step of `steps` (the last one again once they run out). A step
 * with `downMs` closes the listener after its answer and listens again on the same port that much later.
 */
async function scriptedAgent(t: TestContext, accepted: AgentUpdateStatus, steps: Step[]): Promise<Scripted> {
  const port = await freePort();
  const requests: Scripted["requests"] = [];
  let next = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString();
      requests.push({
        method: req.method ?? "",
        url: req.url ?? "",
        authorization: req.headers.authorization,
        ...(text ? { body: JSON.parse(text) } : {}),
      });
      const json = (code: number, body: unknown) =>
        res.writeHead(code, { "content-type": "application/json" }).end(JSON.stringify(body));
      if (req.method === "POST" && req.url === "/v1/agent/update") return json(202, accepted);
      if (req.method !== "GET" || req.url !== `/v1/agent/update/${ID}`)
        return json(404, { code: "not_found" });
      const step = steps[Math.min(next++, steps.length - 1)] as Step;
      if (step.problem)
        json(step.problem[0], { code: step.problem[1], title: "Scripted", detail: "as scripted" });
      else json(200, step.status);
      if (step.downMs !== undefined) res.once("finish", () => restart(step.downMs as number));
    });
  });
  const listen = () => new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
  let back: NodeJS.Timeout | undefined;
  const restart = (ms: number) => {
    server.close();
    server.closeAllConnections();
    back = setTimeout(() => void listen(), ms);
  };
  await listen();
  t.after(() => {
    clearTimeout(back);
    server.closeAllConnections();
    return new Promise<void>((r) => server.close(() => r()));
  });
  return {
    port,
    requests,
    env: { HOSTKEEPER_LISTEN: `127.0.0.1:${port}`, HOSTKEEPER_TOKEN: TEST_TOKEN },
  };
}

const lines = (text: string) => text.trimEnd().split("\n");

describe("agent update against the agent outside the packaged service", () => {
  test("without update keys: the 409 in one line, exit 1; --json prints the problem body", async (t) => {
    const agent = await startCliAgent(t);
    const r = await runCli(["agent", "update", "9.9.9"], agent.env);
    assert.equal(r.code, 1, r.stderr);
    assert.equal(r.stdout, "");
    const p = problemLine(r.stderr);
    assert.equal(p.status, 409);
    assert.equal(p.code, "agent_update_not_configured");
    assert.match(p.detail, /HOSTKEEPER_AGENT_UPDATE_KEYS/);

    const json = await runCli(["agent", "update", "9.9.9", "--json"], agent.env);
    assert.equal(json.code, 1);
    assert.equal(JSON.parse(json.stdout).code, "agent_update_not_configured");
    assert.equal(problemLine(json.stderr).code, "agent_update_not_configured");
  });

  test("with keys, outside hostkeeper.service: agent_update_unsupported; a bad checksum: validation_failed", async (t) => {
    const dir = mkdtempSync(join(tmpdir(), "hk-cli-au-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const agent = await startCliAgent(t, {
      HOSTKEEPER_AGENT_UPDATE_KEYS: minisignKeypair(dir, "release").line,
      HOSTKEEPER_AGENT_UPDATE_SOURCE: "https://releases.invalid/hostkeeper",
    });
    const url = await runCli(
      ["agent", "update", "https://releases.invalid/hostkeeper_9.9.9_amd64.deb", "--no-follow"],
      agent.env,
    );
    assert.equal(url.code, 1, url.stderr);
    assert.equal(url.stdout, "");
    const p = problemLine(url.stderr);
    assert.equal(p.status, 409);
    assert.equal(p.code, "agent_update_unsupported");
    const json = await runCli(["agent", "update", "9.9.9", "--json"], agent.env);
    assert.equal(json.code, 1);
    assert.equal(JSON.parse(json.stdout).code, "agent_update_unsupported");

    const bad = await runCli(["agent", "update", "9.9.9", "--checksum", "abc"], agent.env);
    assert.equal(bad.code, 1);
    assert.equal(problemLine(bad.stderr).code, "validation_failed");
  });
});

describe("agent update: refused command lines exit 2 with the usage line", () => {
  for (const [name, args, reason] of [
    ["no argument", [], /^hostkeeper: missing arguments: <version\|url>$/],
    ["two arguments", ["0.1.1", "0.1.2"], /^hostkeeper: unexpected argument "0\.1\.2"$/],
    ["an unknown option", ["0.1.1", "--force"], /^hostkeeper: unknown option --force$/],
    [
      "--source with a URL",
      ["https://r.example.test/hostkeeper_0.1.1_amd64.deb", "--source", "https://r.example.test"],
      /^hostkeeper: --source goes with a version, not with a package URL$/,
    ],
  ] as const)
    test(name, async () => {
      // No agent at all: the command line is refused before anything is asked of it.
      const r = await runCli(["agent", "update", ...args], { HOSTKEEPER_LISTEN: "127.0.0.1:9" });
      assert.equal(r.code, 2, r.stderr);
      assert.equal(r.stdout, "");
      const [first, second, ...rest] = r.stderr.split("\n");
      assert.match(first ?? "", reason);
      assert.equal(second, "usage: hostkeeper agent update <version|url> [options]");
      assert.deepEqual(rest, [""]);
    });
});

describe("agent update follows the update against a scripted agent", () => {
  test("a line per state, through the agent's restart, to completed: exit 0", async (t) => {
    const agent = await scriptedAgent(t, statusOf("downloading", downloaded(12_300_000)), [
      { status: statusOf("downloading", downloaded(30_000_000)) },
      { status: statusOf("verifying", downloaded(40_100_000)) },
      { status: statusOf("installing"), downMs: 2_500 },
      { status: statusOf("restarting") },
      { status: statusOf("completed") },
    ]);
    const r = await runCli(["agent", "update", "0.1.1"], {
      ...agent.env,
      HOSTKEEPER_AGENT_UPDATE_TIMEOUT_S: "5",
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr, "");
    const out = lines(r.stdout);
    assert.deepEqual(out.slice(0, 3), [
      `agent update ${ID} downloading 12.3/40.1 MB`,
      `agent update ${ID} verifying`,
      `agent update ${ID} installing 0.1.0 -> 0.1.1`,
    ]);
    // Its listener closed: the connection refused, waited for (HOSTKEEPER_AGENT_UPDATE_TIMEOUT_S + 60 s).
    assert.match(
      out[3] ?? "",
      new RegExp(
        `^agent update ${ID} waiting for the agent \\(up to 65 s\\): the agent is not running at 127\\.0\\.0\\.1:${agent.port} \\(connection refused\\)$`,
      ),
    );
    assert.deepEqual(out.slice(4), [
      `agent update ${ID} restarting 0.1.0 -> 0.1.1`,
      `agent update ${ID} completed: 0.1.0 -> 0.1.1 in 41.2 s`,
    ]);
    const [post, ...gets] = agent.requests;
    assert.deepEqual(post, {
      method: "POST",
      url: "/v1/agent/update",
      authorization: `Bearer ${TEST_TOKEN}`,
      body: { version: "0.1.1" },
    });
    assert.equal(gets.length, 5, "each step asked for once, and nothing after the final state");
  });

  test("a URL with its options; rolled back: its reason on stderr, exit 1", async (t) => {
    const rolledBack = statusOf("rolled_back", {
      error: { code: "not_ready", message: "the new agent did not answer ready with 0.1.1 within 120 s" },
    });
    const agent = await scriptedAgent(t, statusOf("downloading"), [
      { status: statusOf("verifying") },
      { status: statusOf("installing"), downMs: 1_500 },
      { status: rolledBack },
    ]);
    const url = "https://r.example.test/0.1.1/hostkeeper_0.1.1_amd64.deb";
    const checksum = `sha256:${"ab".repeat(32)}`;
    const r = await runCli(
      ["agent", "update", url, "--allow-downgrade", "--checksum", checksum, "--timeout", "5"],
      agent.env,
    );
    assert.equal(r.code, 1, r.stderr);
    assert.equal(
      r.stderr,
      `hostkeeper: agent update ${ID} rolled_back: the new agent did not answer ready with 0.1.1 within 120 s\n`,
    );
    const out = lines(r.stdout);
    assert.deepEqual(out.slice(0, 3), [
      `agent update ${ID} downloading 0.0/40.1 MB`,
      `agent update ${ID} verifying`,
      `agent update ${ID} installing 0.1.0 -> 0.1.1`,
    ]);
    assert.match(
      out.at(-1) ?? "",
      / waiting for the agent \(up to 180 s\): /,
      "the end is said once, on stderr",
    );
    assert.deepEqual(agent.requests[0]?.body, { url, allow_downgrade: true, checksum });
  });

  test("--json: each new record once, one per line; failed exits 1; --source goes as artifact_source", async (t) => {
    const failed = statusOf("failed", {
      error: { code: "signature_invalid", message: "the package's signature does not verify" },
    });
    const verifying = statusOf("verifying", downloaded(40_100_000));
    const agent = await scriptedAgent(t, statusOf("downloading"), [
      { status: verifying },
      { status: verifying },
      { status: failed },
    ]);
    const r = await runCli(
      ["agent", "update", "0.1.1", "--json", "--source", "s3://releases/hostkeeper"],
      agent.env,
    );
    assert.equal(r.code, 1);
    assert.equal(
      r.stderr,
      `hostkeeper: agent update ${ID} failed: the package's signature does not verify\n`,
    );
    assert.deepEqual(
      lines(r.stdout).map((l) => JSON.parse(l)),
      [statusOf("downloading"), verifying, failed],
    );
    assert.deepEqual(agent.requests[0]?.body, {
      version: "0.1.1",
      artifact_source: "s3://releases/hostkeeper",
    });
  });

  test("--no-follow: the accepted update and where to see it, nothing asked after", async (t) => {
    const agent = await scriptedAgent(t, statusOf("downloading"), [{ status: statusOf("verifying") }]);
    const r = await runCli(["agent", "update", "0.1.1", "--no-follow"], agent.env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(
      r.stdout,
      `agent update ${ID} downloading 0.0/40.1 MB; GET /v1/agent/update/${ID} shows it\n`,
    );
    const json = await runCli(["agent", "update", "0.1.1", "--no-follow", "--json"], agent.env);
    assert.deepEqual(JSON.parse(json.stdout), statusOf("downloading"));
    assert.deepEqual(
      agent.requests.map((q) => q.method),
      ["POST", "POST"],
    );
  });

  test("a problem while following ends it with the problem line, exit 1", async (t) => {
    const agent = await scriptedAgent(t, statusOf("downloading"), [
      { status: statusOf("verifying") },
      { problem: [404, "agent_update_not_found"] },
    ]);
    const r = await runCli(["agent", "update", "0.1.1"], agent.env);
    assert.equal(r.code, 1);
    assert.deepEqual(problemLine(r.stderr), {
      status: 404,
      code: "agent_update_not_found",
      detail: "as scripted",
    });
  });

  test("Ctrl-C while the agent is away stops the following only: exit 130", async (t) => {
    const agent = await scriptedAgent(t, statusOf("downloading"), [
      { status: statusOf("installing"), downMs: 60_000 },
    ]);
    const cli = startCli(t, ["agent", "update", "0.1.1"], agent.env);
    await waitFor("the CLI to wait for the agent", () =>
      cli.stdout().includes(" waiting for the agent ") ? true : undefined,
    );
    assert.equal(await cli.interrupt(), 130, cli.stderr());
    assert.equal(
      cli.stderr(),
      `hostkeeper: stopped following; agent update ${ID} goes on: GET /v1/agent/update/${ID} shows it\n`,
    );
  });

  test("on a terminal: the download's progress rewritten in place, then a line per state", async (t) => {
    const agent = await scriptedAgent(t, statusOf("downloading"), [
      { status: statusOf("downloading", downloaded(20_000_000)) },
      { status: statusOf("downloading", downloaded(40_100_000)) },
      { status: statusOf("verifying", downloaded(40_100_000)) },
      { status: statusOf("completed") },
    ]);
    const r = await runInTerminal(t, ["agent", "update", "0.1.1"], agent.env);
    assert.equal(r.code, 0, r.stdout);
    const [download = "", verify, done, ...rest] = r.stdout.split("\r\n");
    assert.deepEqual(download.split("\r\x1b[2K").slice(1), [
      `agent update ${ID} downloading 0.0/40.1 MB`,
      `agent update ${ID} downloading 20.0/40.1 MB`,
      `agent update ${ID} downloading 40.1/40.1 MB`,
    ]);
    assert.equal(verify, `\r\x1b[2Kagent update ${ID} verifying`);
    assert.equal(done, `\r\x1b[2Kagent update ${ID} completed: 0.1.0 -> 0.1.1 in 41.2 s`);
    assert.deepEqual(rest, [""]);
  });
});
