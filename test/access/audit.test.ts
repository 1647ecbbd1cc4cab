import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { type AddressInfo, connect, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import Database from "better-sqlite3";
import type { AuditRecord } from "../../src/access/audit-store.js";
import { buildTestApp, TEST_TOKEN, type TestApp } from "../helpers/app.js";
import { startReceiver, startUpstream } from "../helpers/http.js";
import { rawRequest, requestText } from "../helpers/raw-http.js";
import { request, startAgent } from "../helpers/serve.js";
import { waitFor } from "../helpers/wait.js";
import { concretePath, secretOf, startGuardedAgent, writeTokensFile } from "../http/support.js";

type After = { after: (fn: () => unknown) => void };

const READS = new Set(["GET", "HEAD"]);

async function auditRecords(a: Pick<TestApp, "call">, query = "limit=1000"): Promise<AuditRecord[]> {
  const res = await a.call({ method: "GET", url: `/v1/audit?${query}` });
  assert.equal(res.statusCode, 200, res.body);
  return (res.json() as { records: AuditRecord[] }).records;
}

/**
 * A TCP server that takes connections and never answers: a Caddy admin API whose change never completes.
 * `requests` resolves with the first bytes of each connection as they come.
 */
async function hangingServer(t: After) {
  const sockets = new Set<Socket>();
  const received: string[] = [];
  const listeners = new Set<() => void>();
  const server = createServer((s) => {
    sockets.add(s);
    s.on("data", (d: Buffer) => {
      received.push(d.toString());
      for (const l of listeners) l();
    });
    s.on("error", () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.after(
    () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  );
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    /** Calls `fn` synchronously on the next bytes received. */
    onData: (fn: () => void) => {
      const once = () => {
        listeners.delete(once);
        fn();
      };
      listeners.add(once);
    },
  };
}

describe("the audit trail records every request with effects", () => {
  test("every mutating route of the route table, refused ones included, with who, what and the outcome", async (t) => {
    const agent = await startGuardedAgent(t);
    const mutating = agent.app.registeredRoutes().filter((r) => !r.public && !READS.has(r.method));
    assert.ok(mutating.length >= 9, `only ${mutating.length} mutating routes`);
    for (const [i, route] of mutating.entries()) {
      const res = await rawRequest(
        agent.port,
        requestText(route.method, concretePath(route.url), {
          headers: {
            authorization: `Bearer ${TEST_TOKEN}`,
            "content-type": "application/json",
            "x-request-id": `audit-walk-${i}`,
          },
          body: "{not json",
        }),
      );
      assert.equal(res.status, 400, `${route.method} ${route.url}: ${res.body}`);
    }
    // Reads and refused tokens leave no record.
    await agent.call({ method: "GET", url: "/v1/proxy/routes" });
    await agent.call({
      method: "POST",
      url: "/v1/system/check-updates",
      headers: { authorization: "Bearer nope" },
    });

    const records = await auditRecords(agent);
    assert.equal(records.length, mutating.length, JSON.stringify(records, null, 1));
    for (const [i, route] of mutating.entries()) {
      const r = records.find((x) => x.request_id === `audit-walk-${i}`);
      assert.ok(r, `no record of ${route.method} ${route.url}`);
      assert.equal(r.method, route.method);
      assert.equal(r.route, route.url);
      assert.equal(r.path, concretePath(route.url));
      assert.equal(r.token, "default");
      assert.equal(r.remote_address, "127.0.0.1");
      assert.equal(r.status, 400);
      assert.equal(r.outcome, "refused");
      assert.ok(r.completed_at !== null && r.completed_at >= r.at);
      assert.equal(typeof r.summary.operation, "string", JSON.stringify(r));
    }
  });

  test("each kind of mutation with its summary, and a scope refusal, never with secrets", async (t) => {
    const file = writeTokensFile(t, [
      { name: "ci", scopes: ["proxy:read"], secret: secretOf("ci") },
      { name: "deployer", scopes: ["proxy:write"], secret: secretOf("deployer") },
    ]);
    const agent = await startGuardedAgent(t, { HOSTKEEPER_TOKENS_FILE: file });
    const receiver = await startReceiver(t);
    const up = await startUpstream(t, "u");
    const callback = `${receiver.url}?token=callback-credential-123`;
    const deployer = { authorization: `Bearer ${secretOf("deployer")}` };
    const body = { domain: "audit.example.test", upstreams: [{ dial: `127.0.0.1:${up.port}` }] };
    const expect = async (
      method: string,
      url: string,
      payload: unknown,
      status: number,
      headers: Record<string, string> = {},
    ) => {
      const res = await agent.call({ method, url, payload, headers });
      assert.equal(res.statusCode, status, `${method} ${url}: ${res.body}`);
      return res;
    };

    await expect("POST", "/v1/proxy/routes", { ...body, callback_url: callback }, 201, deployer);
    await expect("PUT", "/v1/proxy/routes/audit.example.test", { ...body, strategy: "first" }, 200, deployer);
    const history = await agent.call({ method: "GET", url: "/v1/proxy/routes/audit.example.test/history" });
    const changes = (history.json() as { changes: { change_id: number; operation: string }[] }).changes;
    // The state before the replace: the route as created.
    const changeId = changes.find((c) => c.operation === "replace")?.change_id;
    await expect("POST", "/v1/proxy/routes/audit.example.test/restore", { change_id: changeId }, 200);
    await expect("DELETE", "/v1/proxy/routes/audit.example.test", undefined, 204);
    await receiver.waitFor(1, 15_000);
    const delivered = await waitFor("a delivered event", async () => {
      const events = (await agent.call({ method: "GET", url: "/v1/events?state=delivered" })).json() as {
        events: { id: string }[];
      };
      return events.events[0]?.id;
    });
    await expect("POST", `/v1/events/${delivered}/redeliver`, undefined, 202);
    const check = await agent.call({ method: "POST", url: "/v1/system/check-updates" });
    const apply = await agent.call({
      method: "POST",
      url: "/v1/system/apply-updates",
      payload: { update_type: "security", auto_reboot: false },
    });
    await expect(
      "POST",
      "/v1/operator/update",
      {
        callback_url: callback,
        update_process_id: "upd-audit-1",
        version: "1.2.3",
        checksum: "a".repeat(64),
      },
      202,
    );
    const rotated = await expect("POST", "/v1/tokens/ci/rotate", undefined, 200);
    // Refused for want of a scope: recorded under the token's name.
    await expect("DELETE", "/v1/proxy/routes/other.example.test", undefined, 403, {
      authorization: `Bearer ${secretOf("ci")}`,
    });

    const records = await auditRecords(agent);
    const summary = (op: string) => {
      const r = records.find((x) => x.summary.operation === op);
      assert.ok(r, `no record of ${op}: ${JSON.stringify(records.map((x) => x.summary))}`);
      return r;
    };
    const created = summary("createRoute");
    assert.equal(created.token, "deployer");
    assert.equal(created.outcome, "succeeded");
    assert.equal(created.status, 201);
    assert.deepEqual(created.summary, {
      operation: "createRoute",
      domain: "audit.example.test",
      upstreams: 1,
    });
    assert.deepEqual(summary("replaceRoute").summary, {
      operation: "replaceRoute",
      route_id: "audit.example.test",
      domain: "audit.example.test",
      upstreams: 1,
      strategy: "first",
    });
    assert.deepEqual(summary("restoreRoute").summary, {
      operation: "restoreRoute",
      route_id: "audit.example.test",
      change_id: changeId ?? null,
    });
    assert.equal(summary("restoreRoute").token, "default");
    assert.deepEqual(summary("deleteRoute").summary, {
      operation: "deleteRoute",
      route_id: "audit.example.test",
    });
    assert.deepEqual(summary("redeliverEvent").summary, { operation: "redeliverEvent", event_id: delivered });
    assert.equal(summary("checkUpdates").status, check.statusCode);
    assert.equal(summary("applyUpdates").status, apply.statusCode);
    assert.deepEqual(summary("applyUpdates").summary, {
      operation: "applyUpdates",
      update_type: "security",
      auto_reboot: false,
    });
    assert.deepEqual(summary("startOperatorUpdate").summary, {
      operation: "startOperatorUpdate",
      update_process_id: "upd-audit-1",
      version: "1.2.3",
    });
    assert.deepEqual(summary("rotateToken").summary, { operation: "rotateToken", name: "ci" });
    const refused = records.find((r) => r.route === "/v1/proxy/routes/:route_id" && r.status === 403);
    assert.ok(refused);
    assert.equal(refused.token, "ci");
    assert.equal(refused.outcome, "refused");
    assert.equal(refused.path, "/v1/proxy/routes/other.example.test");

    const text = JSON.stringify(records);
    for (const secret of [
      TEST_TOKEN,
      secretOf("ci"),
      secretOf("deployer"),
      (rotated.json() as { token: string }).token,
      "callback-credential-123",
      "a".repeat(64),
    ])
      assert.ok(!text.includes(secret), `a secret in the audit trail: ${secret}`);
  });

  test("since and limit page through the records, oldest first", async (t) => {
    let now = Date.parse("2026-11-23T10:00:00Z");
    const a = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9" }, { now: () => now });
    for (let i = 0; i < 5; i++) {
      await a.call({ method: "POST", url: `/v1/tokens/t${i}/rotate` });
      now += 1000;
    }
    const all = await auditRecords(a);
    assert.deepEqual(
      all.map((r) => r.summary.name),
      ["t0", "t1", "t2", "t3", "t4"],
    );
    const page = await auditRecords(a, "since=2026-11-23T10:00:02.000Z&limit=2");
    assert.deepEqual(
      page.map((r) => r.summary.name),
      ["t2", "t3"],
    );
    const bad = await a.call({ method: "GET", url: "/v1/audit?since=yesterday" });
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().code, "validation_failed");
  });

  test("records older than the retention are pruned", async (t) => {
    let now = Date.parse("2026-11-23T10:00:00Z");
    const env = { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9", HOSTKEEPER_AUDIT_RETENTION_DAYS: "1" };
    const dataDir = mkdtempSync(join(tmpdir(), "hk-audit-"));
    t.after(() => rmSync(dataDir, { recursive: true, force: true }));
    const first = await buildTestApp(t, env, { now: () => now, dataDir });
    await first.call({ method: "POST", url: "/v1/tokens/early/rotate" });
    now += 12 * 3_600_000;
    await first.call({ method: "POST", url: "/v1/tokens/later/rotate" });
    await first.app.close();
    now += 12 * 3_600_000 + 1;
    // The prune runs at start and hourly.
    const second = await buildTestApp(t, env, { now: () => now, dataDir });
    assert.deepEqual(
      (await auditRecords(second)).map((r) => r.summary.name),
      ["later"],
    );
  });
});

describe("the record of a mutation is written before its effect", () => {
  test("a mutation whose effect fails has its record, completed as failed", async (t) => {
    // Nothing listens on port 9: the route cannot be written.
    const a = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9" });
    const res = await a.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: { domain: "fails.example.test", upstreams: [{ dial: "127.0.0.1:8" }] },
    });
    assert.equal(res.statusCode, 503, res.body);
    const [r] = await auditRecords(a);
    assert.equal(r?.outcome, "failed");
    assert.equal(r?.status, 503);
    assert.equal(r?.summary.domain, "fails.example.test");
  });

  test("a client that goes away before the answer leaves its record aborted", async (t) => {
    const caddy = await hangingServer(t);
    const a = await buildTestApp(t, {
      HOSTKEEPER_CADDY_ADMIN: caddy.url,
      HOSTKEEPER_CADDY_TIMEOUT_MS: "2000",
    });
    await a.app.listen({ host: "127.0.0.1", port: 0 });
    const port = (a.app.server.address() as AddressInfo).port;
    const reached = new Promise<void>((r) => caddy.onData(r));
    const body = JSON.stringify({ domain: "gone.example.test", upstreams: [{ dial: "127.0.0.1:8" }] });
    const socket = connect({ host: "127.0.0.1", port });
    socket.on("error", () => undefined);
    socket.write(
      requestText("POST", "/v1/proxy/routes", {
        headers: { authorization: `Bearer ${TEST_TOKEN}`, "content-type": "application/json" },
        body,
      }),
    );
    await reached;
    socket.destroy();
    const record = await waitFor("the record to be aborted", () => {
      const r = a.app.services.audit.list({ limit: 10 })[0];
      return r?.outcome === "aborted" ? r : undefined;
    });
    assert.equal(record.status, null);
    assert.equal(record.summary.domain, "gone.example.test");
  });

  test("an agent killed between record and effect leaves the record, marked interrupted at its next start", async (t) => {
    const caddy = await hangingServer(t);
    const dataDir = mkdtempSync(join(tmpdir(), "hk-audit-crash-"));
    t.after(() => rmSync(dataDir, { recursive: true, force: true }));
    const env = {
      HOSTKEEPER_DATA_DIR: dataDir,
      HOSTKEEPER_TOKEN: TEST_TOKEN,
      HOSTKEEPER_CADDY_ADMIN: caddy.url,
      HOSTKEEPER_CADDY_TIMEOUT_MS: "600000",
      HOSTKEEPER_CONFIG: join(dataDir, "no-config.json"),
    };
    // The agent reads its config file when one is named; an empty one keeps this host's out of the test.
    writeFileSync(env.HOSTKEEPER_CONFIG, "{}");
    const agent = await startAgent(t, env);
    const seen = caddy.received.length;
    // The moment the change reaches "Caddy", the record must already be committed, read by another process.
    const atEffect = new Promise<{ outcome: string; path: string }[]>((resolve) =>
      caddy.onData(() => {
        const db = new Database(join(dataDir, "hostkeeper.db"), { readonly: true, fileMustExist: true });
        try {
          resolve(
            db.prepare("SELECT outcome, path FROM audit_log").all() as { outcome: string; path: string }[],
          );
        } finally {
          db.close();
        }
      }),
    );
    const pending = request(agent.port, "POST", "/v1/proxy/routes", TEST_TOKEN, {
      domain: "crash.example.test",
      upstreams: [{ dial: "127.0.0.1:8" }],
    }).catch((err: Error) => err);
    const rows = await atEffect;
    assert.ok(caddy.received.length > seen);
    assert.deepEqual(rows, [{ outcome: "pending", path: "/v1/proxy/routes" }]);

    process.kill(agent.child.pid as number, "SIGKILL");
    await agent.exited;
    assert.ok((await pending) instanceof Error, "the request got no answer");

    const next = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9" }, { dataDir });
    const [r] = await auditRecords(next);
    assert.equal(r?.outcome, "interrupted");
    assert.equal(r?.status, null);
    assert.ok(r?.completed_at);
    assert.equal(r?.summary.domain, "crash.example.test");
    assert.equal(r?.token, "default");
  });
});
