import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { packageVersion } from "../src/paths.js";
import { freePort, httpRequest } from "../support/loopback.js";
import { startUpstream } from "./helpers/http.js";
import { type ServedAgent, startAgent, stopAgent } from "./helpers/serve.js";

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const TOKEN = "logs-test-token-0123456789";

type Line = Record<string, unknown> & { level: number; time: string; msg: string };

/** Every line of the agent's output, each of which must be one JSON object. */
function lines(agent: ServedAgent): Line[] {
  return agent
    .log()
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => {
      let line: Line | undefined;
      assert.doesNotThrow(() => {
        line = JSON.parse(l) as Line;
      }, `a log line that is not JSON: ${l}`);
      return line as Line;
    });
}

const call = (port: number, method: string, path: string, headers: Record<string, string>, body?: unknown) =>
  httpRequest(port, method, path, { body, headers: { authorization: `Bearer ${TOKEN}`, ...headers } });

test("the real agent, embedded Caddy: JSON lines with ISO times, the start line, a route change's line, request ids, Caddy's rolled log", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "hk-logs-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const caddyListen = `127.0.0.1:${await freePort()}`;
  const agent = await startAgent(t, {
    HOSTKEEPER_DATA_DIR: dataDir,
    HOSTKEEPER_CADDY_LISTEN: caddyListen,
    HOSTKEEPER_TOKEN: TOKEN,
    // A typo: the agent warns and names the setting meant.
    HOSTKEEPER_LOG_FORMT: "pretty",
  });
  await agent.waitForLog("started on Node", 10_000);

  await t.test("stdout is a pipe: every line is JSON with an ISO 8601 time", () => {
    for (const l of lines(agent)) assert.match(l.time, ISO, JSON.stringify(l));
  });

  await t.test("one start line: agent, Node and Caddy versions, every listen address", () => {
    const start = lines(agent).filter((l) => l.msg.includes("started on Node"));
    assert.equal(start.length, 1);
    const [line] = start as [Line];
    assert.deepEqual(line.versions, {
      agent: packageVersion(),
      node: process.version,
      caddy: (line.versions as { caddy: string }).caddy,
    });
    assert.match(String((line.versions as { caddy: unknown }).caddy), /^v?2\.\d+/);
    assert.deepEqual(line.listen, {
      api: `127.0.0.1:${agent.port}`,
      api_scheme: "http",
      caddy_admin: `unix:${join(dataDir, "caddy", "admin.sock")}`,
      caddy_server: "srv0",
      caddy_listen: [caddyListen],
    });
    assert.equal(line.caddy_mode, "embedded");
    for (const text of [`http://127.0.0.1:${agent.port}`, caddyListen, process.version, packageVersion()])
      assert.ok(line.msg.includes(text), `${text} in ${line.msg}`);
  });

  await t.test("an unknown HOSTKEEPER_* variable is a warning naming the closest setting", () => {
    const w = lines(agent).filter((l) => l.msg.includes("HOSTKEEPER_LOG_FORMT"));
    assert.equal(w.length, 1);
    assert.equal(w[0]?.level, 40);
    assert.match(w[0]?.msg ?? "", /did you mean HOSTKEEPER_LOG_FORMAT\?/);
  });

  await t.test("a route change logs one line with all its fields and the caller's request id", async () => {
    const up = await startUpstream(t, "u");
    const dial = `127.0.0.1:${up.port}`;
    const res = await call(
      agent.port,
      "POST",
      "/v1/proxy/routes",
      { "x-request-id": "caller-req.42" },
      {
        domain: "logged.test",
        upstreams: [{ dial }],
      },
    );
    assert.equal(res.status, 201, res.body);
    assert.equal(res.headers["x-request-id"], "caller-req.42");
    await agent.waitForLog("route logged.test: create applied", 5_000);
    const [line, ...more] = lines(agent).filter((l) => l.msg === "route logged.test: create applied");
    assert.equal(more.length, 0);
    assert.ok(line);
    assert.equal(line.route_id, "logged.test");
    assert.equal(line.operation, "create");
    assert.deepEqual(line.upstreams, [dial]);
    assert.equal(line.outcome, "applied");
    assert.equal(line.batch_size, 1);
    assert.equal(typeof line.duration_ms, "number");
    assert.ok((line.duration_ms as number) >= 0);
    assert.equal(line.request_id, "caller-req.42");
    assert.equal(typeof line.change_id, "number");

    // A refused change says so, with the same fields: never reached Caddy, so batch size 0.
    const again = await call(
      agent.port,
      "POST",
      "/v1/proxy/routes",
      { "x-request-id": "caller-req.43" },
      {
        domain: "logged.test",
        upstreams: [{ dial }],
      },
    );
    assert.equal(again.status, 409);
    await agent.waitForLog("route logged.test: create refused", 5_000);
    const refused = lines(agent).find((l) => l.msg === "route logged.test: create refused");
    assert.equal(refused?.batch_size, 0);
    assert.equal(refused?.request_id, "caller-req.43");

    const del = await call(agent.port, "DELETE", "/v1/proxy/routes/logged.test", {
      "x-request-id": "caller-req.44",
    });
    assert.equal(del.status, 204);
    await agent.waitForLog("route logged.test: delete applied", 5_000);
    const deleted = lines(agent).find((l) => l.msg === "route logged.test: delete applied");
    assert.deepEqual(deleted?.upstreams, [dial], "a removal names the upstreams of the route it removed");
  });

  await t.test("x-request-id: echoed; generated when absent or unsafe; on problems too", async () => {
    const given = await call(agent.port, "GET", "/v1/proxy/routes", { "x-request-id": "abc-123" });
    assert.equal(given.headers["x-request-id"], "abc-123");
    const absent = await call(agent.port, "GET", "/v1/proxy/routes", {});
    assert.match(String(absent.headers["x-request-id"]), UUID);
    for (const unsafe of ["has space", "x".repeat(129), 'quote"d', "semi;colon"]) {
      const r = await call(agent.port, "GET", "/v1/proxy/routes", { "x-request-id": unsafe });
      assert.match(String(r.headers["x-request-id"]), UUID, unsafe);
    }
    const noToken = await httpRequest(agent.port, "GET", "/v1/proxy/routes", {
      headers: { "x-request-id": "unauth-1" },
    });
    assert.equal(noToken.status, 401);
    assert.equal(noToken.headers["x-request-id"], "unauth-1");
    const notFound = await call(agent.port, "GET", "/v1/nowhere", { "x-request-id": "nf-1" });
    assert.equal(notFound.status, 404);
    assert.equal(notFound.headers["x-request-id"], "nf-1");
    const badEscape = await call(agent.port, "GET", "/v1/proxy/routes/%zz", { "x-request-id": "bad-1" });
    assert.equal(badEscape.status, 400);
    assert.equal(badEscape.headers["x-request-id"], "bad-1");
    // The request's own log lines carry the same id.
    await agent.waitForLog('"reqId":"nf-1"', 5_000);
  });

  await t.test("the embedded Caddy logs to a file it rolls, in JSON with ISO times", () => {
    const autosave = JSON.parse(
      readFileSync(join(dataDir, "caddy", "config", "caddy", "autosave.json"), "utf8"),
    );
    assert.deepEqual(autosave.logging.logs.default, {
      writer: {
        output: "file",
        filename: join(dataDir, "caddy", "caddy.log"),
        roll: true,
        roll_size_mb: 10,
        roll_keep: 5,
      },
      encoder: { format: "json", time_format: "iso8601" },
    });
    const caddyLines = readFileSync(join(dataDir, "caddy", "caddy.log"), "utf8")
      .trim()
      .split("\n");
    assert.ok(caddyLines.length > 0);
    for (const l of caddyLines) assert.match(String(JSON.parse(l).ts), /^\d{4}-\d\d-\d\dT/);
  });

  assert.equal(await stopAgent(agent), 0);
});

test("HOSTKEEPER_LOG_FORMAT=pretty: lines for people, with ISO times", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "hk-logs-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const agent = await startAgent(t, {
    HOSTKEEPER_DATA_DIR: dataDir,
    HOSTKEEPER_CADDY_ADMIN: `http://127.0.0.1:${await freePort()}`,
    HOSTKEEPER_TOKEN: TOKEN,
    HOSTKEEPER_LOG_FORMAT: "pretty",
  });
  await agent.waitForLog("started on Node", 10_000);
  const start = agent
    .log()
    .split("\n")
    .find((l) => l.includes("started on Node"));
  assert.ok(start);
  assert.throws(() => JSON.parse(start));
  assert.match(start, /^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] INFO/);
  assert.ok(start.includes("external Caddy (version unknown)"), start);
  assert.equal(await stopAgent(agent), 0);
});

/** A GET to the embedded Caddy's admin socket; Caddy logs each such request, its URI included. */
const adminGetOnce = (socketPath: string, path: string) =>
  new Promise<void>((resolve, reject) => {
    // Caddy's error answer repeats the path in a header.
    const opts = { socketPath, path, method: "GET", headers: { host: "localhost" }, maxHeaderSize: 1 << 20 };
    const req = http.request(opts, (res) => {
      res.resume();
      res.on("end", resolve);
    });
    req.on("error", reject);
    req.end();
  });

/**
 * One admin request, sent again when the connection is reset: Caddy restarts its admin endpoint after a
 * config change, and the agent's own changes at its start can land while the test sends (as the agent's
 * reads retry them).
 */
async function adminGet(socketPath: string, path: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await adminGetOnce(socketPath, path);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (attempt >= 3 || (code !== "ECONNRESET" && code !== "EPIPE")) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

test("the embedded Caddy rolls its log at the configured size and keeps the configured number", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "hk-logs-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const agent = await startAgent(t, {
    HOSTKEEPER_DATA_DIR: dataDir,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${await freePort()}`,
    HOSTKEEPER_TOKEN: TOKEN,
    HOSTKEEPER_CADDY_LOG_ROLL_SIZE_MB: "1",
    HOSTKEEPER_CADDY_LOG_ROLL_KEEP: "1",
  });
  const caddyDir = join(dataDir, "caddy");
  // About 3 MiB of Caddy's own log lines: 48 admin requests with a 64 KiB path each.
  const long = `/config/${"x".repeat(64 * 1024)}`;
  for (let i = 0; i < 48; i++) await adminGet(join(caddyDir, "admin.sock"), long);
  const rolled = () => readdirSync(caddyDir).filter((f) => /^caddy-.+\.log(\.gz)?$/.test(f));
  // What the folder holds, sizes included, for the failure messages.
  const listing = () =>
    readdirSync(caddyDir)
      .map((f) => `${f} (${statSync(join(caddyDir, f)).size} B)`)
      .join(", ");
  // Caddy compresses and removes old rolled files in the background, later under a loaded machine.
  const end = Date.now() + 30_000;
  while (Date.now() < end && !(rolled().length === 1 && rolled()[0]?.endsWith(".gz")))
    await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(
    rolled().map((f) => f.endsWith(".gz")),
    [true],
    `one gzipped rolled file: ${listing()}`,
  );
  assert.ok(statSync(join(caddyDir, "caddy.log")).size <= 1024 * 1024 + 70 * 1024, listing());
  assert.equal(await stopAgent(agent), 0);
});
