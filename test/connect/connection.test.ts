/**
 * The agent's connection to its control plane (issue 37), against the control plane's library over real TLS
 * on loopback: enrollment, pinning, the handshake's freshness, requests through the agent's own router with
 * the connection's scopes, and the audit trail naming the control plane's key.
 */
import assert from "node:assert/strict";
import { createPrivateKey, generateKeyPairSync } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { redialDelay } from "../../src/connect/client.js";
import { publicKeyBase64 } from "../../src/connect/protocol.js";
import { loadConfig } from "../../src/settings.js";
import { runCli, startCliAgent } from "../cli/support.js";
import { buildTestApp, type TestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { startControlPlane } from "../helpers/control-plane.js";
import { waitFor } from "../helpers/wait.js";
import { handshakeAs } from "./support.js";

interface Connection {
  state: string;
  control_plane: string | null;
  enrolled: boolean;
  last_error: { message: string } | null;
  reconnects: number;
  frames_in: number;
}

async function connection(app: TestApp): Promise<Connection> {
  return (await app.call({ method: "GET", url: "/v1/status" })).json().connect.connection;
}

test("an agent enrolls with its token, and the control plane calls its API over the connection", async (t) => {
  const caddy = await startCaddy(t);
  const cp = await startControlPlane(t);
  const agentApp = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, ...cp.agentEnv() });
  const agent = await cp.waitForAgent();
  const res = await agent.fetch("/v1/status");
  assert.equal(res.status, 200);
  const status = (await res.json()) as { connect: { fingerprint: string; connection: Connection } };
  assert.equal(status.connect.fingerprint, agent.fingerprint);
  assert.equal(status.connect.connection.state, "connected");
  assert.equal(status.connect.connection.control_plane, cp.cp.fingerprint);
  assert.equal(status.connect.connection.enrolled, true);
  assert.ok(status.connect.connection.frames_in >= 3);
  const routes = await agent.fetch("/v1/proxy/routes");
  assert.equal(routes.status, 200);
  const overHttp = await agentApp.call({ method: "GET", url: "/v1/proxy/routes" });
  assert.equal(await routes.text(), overHttp.body);
  assert.ok(cp.enrollment.enrolled.has(agent.fingerprint));
  assert.ok(existsSync(join(agentApp.dataDir, "connect-enrolled")));
});

test("once enrolled, the agent connects with its key alone; its token is not presented again", async (t) => {
  const caddy = await startCaddy(t);
  const cp = await startControlPlane(t);
  let enrollCalls = 0;
  const enroll = cp.enrollment.enroll.bind(cp.enrollment);
  cp.enrollment.enroll = (token, key) => {
    enrollCalls++;
    return enroll(token, key);
  };
  const env: Record<string, string> = { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, ...cp.agentEnv() };
  const first = await buildTestApp(t, env, { dataDir: tmpData(t) });
  const agent = await cp.waitForAgent();
  assert.equal(enrollCalls, 1);
  await first.app.close();
  await agent.closed;
  // The same agent again, the token still set: the key alone gets it in.
  const second = await buildTestApp(t, env, { dataDir: first.dataDir });
  await until(async () => (await connection(second)).state === "connected");
  assert.equal(enrollCalls, 1);
  // A token used once does not enroll another key.
  const other = await buildTestApp(t, { ...env, HOSTKEEPER_ENROLL_TOKEN: env.HOSTKEEPER_ENROLL_TOKEN ?? "" });
  await until(async () => (await connection(other)).last_error !== null);
  const refused = await connection(other);
  assert.notEqual(refused.state, "connected");
  assert.match(refused.last_error?.message ?? "", /refused the agent: the enrollment token is not valid/);
  assert.equal(refused.enrolled, false);
});

test("a change sent again after the agent restarted is answered from its first run, not run again", async (t) => {
  const caddy = await startCaddy(t);
  const cp = await startControlPlane(t);
  const env: Record<string, string> = { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, ...cp.agentEnv() };
  const first = await buildTestApp(t, env, { dataDir: tmpData(t) });
  const create = {
    method: "POST",
    id: "create-kept-1",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ domain: "kept.test", upstreams: [{ dial: "127.0.0.1:9" }] }),
  };
  const before = await (await cp.waitForAgent()).fetch("/v1/proxy/routes", create);
  assert.equal(before.status, 201);
  const answer = await before.text();
  await first.app.close();
  await buildTestApp(t, env, { dataDir: first.dataDir });
  const again = await waitFor("the agent back", () => [...cp.cp.agents.values()].find((a) => a.open));
  const replayed = await again.fetch("/v1/proxy/routes", create);
  assert.equal(replayed.status, 201);
  assert.equal(await replayed.text(), answer);
  // Run again, the same change would have met its own route.
  const rerun = await again.fetch("/v1/proxy/routes", { ...create, id: "create-kept-2" });
  assert.equal(rerun.status, 409);
});

test("a bad token and no token are refused, and said in the agent's status", async (t) => {
  const caddy = await startCaddy(t);
  const refusals: string[] = [];
  const cp = await startControlPlane(t, { onRefused: (why) => refusals.push(why.code) });
  const bad = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    ...cp.agentEnv({ HOSTKEEPER_ENROLL_TOKEN: "not-a-token-the-control-plane-issued" }),
  });
  const none = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    ...cp.agentEnv({ HOSTKEEPER_ENROLL_TOKEN: "" }),
  });
  await until(async () => (await connection(bad)).last_error !== null);
  assert.match((await connection(bad)).last_error?.message ?? "", /enrollment token is not valid/);
  await until(async () => (await connection(none)).last_error !== null);
  assert.match((await connection(none)).last_error?.message ?? "", /is not enrolled/);
  assert.equal(cp.cp.agents.size, 0);
  assert.ok(refusals.includes("bad_token") && refusals.includes("unknown_agent"), refusals.join());
});

test("a control plane whose key is not pinned is refused, and the agent says why", async (t) => {
  const caddy = await startCaddy(t);
  const cp = await startControlPlane(t);
  const stranger = publicKeyBase64(generateKeyPairSync("ed25519").publicKey);
  const app = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    ...cp.agentEnv({ HOSTKEEPER_CONNECT_KEYS: stranger }),
  });
  await until(async () => (await connection(app)).last_error !== null);
  const c = await connection(app);
  assert.notEqual(c.state, "connected");
  assert.match(c.last_error?.message ?? "", new RegExp(`key ${reEscape(cp.cp.fingerprint)} is not pinned`));
  assert.equal(cp.cp.agents.size, 0);
  assert.equal(cp.enrollment.enrolled.size, 0, "the token was not presented to an unpinned control plane");
});

test("a handshake recorded on one connection is refused on another", async (t) => {
  const caddy = await startCaddy(t);
  const cp = await startControlPlane(t);
  const app = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, ...cp.agentEnv() });
  const agent = await cp.waitForAgent();
  const key = createPrivateKey(readFileSync(join(app.dataDir, "connect-key"), "utf8"));
  const ca = readFileSync(cp.caFile, "utf8");
  // A first connection with the agent's own key gets in, and its frames are recorded.
  const recorded = await handshakeAs(cp.url, ca, key);
  assert.equal(recorded.answer.t, "welcome");
  // The same frames on a new connection: its TLS channel is not the recorded one.
  const replayed = await handshakeAs(cp.url, ca, key, recorded.sent);
  assert.deepEqual(code(replayed.answer), "binding_mismatch");
  // A fresh hello with the recorded signature: it signed another nonce of the control plane's.
  const resigned = await handshakeAs(cp.url, ca, key, [undefined, recorded.sent[1]]);
  assert.deepEqual(code(resigned.answer), "bad_signature");
  void agent;
});

test("requests act with the connection's scopes, and the audit trail names the control plane's key", async (t) => {
  const caddy = await startCaddy(t);
  const cp = await startControlPlane(t);
  const app = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    ...cp.agentEnv({ HOSTKEEPER_CONNECT_SCOPES: "proxy:read,system:read" }),
  });
  const agent = await cp.waitForAgent();
  const denied = await agent.fetch("/v1/proxy/routes", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ domain: "a.test", upstreams: [{ dial: "127.0.0.1:9" }] }),
  });
  assert.equal(denied.status, 403);
  const problem = (await denied.json()) as { code: string; detail: string };
  assert.equal(problem.code, "insufficient_scope");
  assert.match(problem.detail, new RegExp(`control-plane ${reEscape(cp.cp.fingerprint)}`));
  // A token on the request changes nothing: the connection's scopes decide.
  const withToken = await agent.fetch("/v1/operator/running-instance", {
    headers: { authorization: "Bearer test-token-0123456789abcdef" },
  });
  assert.equal(withToken.status, 403);
  assert.equal((await agent.fetch("/v1/proxy/routes")).status, 200);
  const audit = (await app.call({ method: "GET", url: "/v1/audit" })).json() as {
    records: { token: string; outcome: string; status: number | null }[];
  };
  const record = audit.records.find((r) => r.token.startsWith("control-plane "));
  assert.ok(record, JSON.stringify(audit));
  assert.equal(record.token, `control-plane ${cp.cp.fingerprint}`);
  assert.equal(record.status, 403);
});

const code = (f: { t: string; code?: string }) => (f.t === "refused" ? f.code : f.t);

/** Waits for `check` to hold, for 15 s at most. */
const until = (check: () => Promise<boolean>) =>
  waitFor("the connection's state", async () => (await check()) || undefined);

function tmpData(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-connect-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const reEscape = (s: string) => s.replace(/[+/]/g, "\\$&");

test("hostkeeper status says whom the agent is connected to, and why not when it is not", async (t) => {
  const cp = await startControlPlane(t);
  const agent = await startCliAgent(t, cp.agentEnv());
  await cp.waitForAgent();
  const connected = await runCli(["status"], agent.env);
  assert.equal(connected.code, 0, connected.stderr);
  const line = (out: string) => /^connection +(.*)$/m.exec(out)?.[1] ?? "";
  assert.match(
    line(connected.stdout),
    new RegExp(`^connected to ${reEscape(cp.cp.fingerprint)} at ${cp.url} since \\S+Z$`),
  );
  await cp.close();
  await until(async () => (await connection(agent)).state !== "connected");
  const down = await runCli(["status"], agent.env);
  assert.match(
    line(down.stdout),
    /^(waiting|connecting) since \S+Z \(wss:\/\/127\.0\.0\.1:\d+\/agents, \d+ reconnects\)/,
  );
});

test("settings: a URL needs pinned keys, ws:// only to loopback, an agent listening on nothing needs a URL", () => {
  const key = publicKeyBase64(generateKeyPairSync("ed25519").publicKey);
  const refused = (env: Record<string, string>, why: RegExp) => assert.throws(() => loadConfig({ env }), why);
  refused({ HOSTKEEPER_CONNECT_URL: "wss://cp.example/agents" }, /needs HOSTKEEPER_CONNECT_KEYS/);
  refused(
    { HOSTKEEPER_CONNECT_URL: "ws://cp.example/agents", HOSTKEEPER_CONNECT_KEYS: key },
    /only for a loopback/,
  );
  refused(
    { HOSTKEEPER_CONNECT_URL: "https://cp.example/", HOSTKEEPER_CONNECT_KEYS: key },
    /expected a wss:\/\/ URL/,
  );
  refused(
    { HOSTKEEPER_CONNECT_URL: "wss://cp.example/", HOSTKEEPER_CONNECT_KEYS: "c2hvcnQ=" },
    /base64 of 32 bytes/,
  );
  refused({ HOSTKEEPER_LISTEN: "off" }, /HOSTKEEPER_LISTEN.*needs HOSTKEEPER_CONNECT_URL/);
  refused(
    {
      HOSTKEEPER_CONNECT_URL: "wss://cp.example/",
      HOSTKEEPER_CONNECT_KEYS: key,
      HOSTKEEPER_CONNECT_SCOPES: "proxy:fly",
    },
    /unknown scopes: proxy:fly/,
  );
  const ok = loadConfig({
    env: {
      HOSTKEEPER_LISTEN: "off",
      HOSTKEEPER_CONNECT_URL: "ws://127.0.0.1:9/agents",
      HOSTKEEPER_CONNECT_KEYS: key,
    },
  });
  assert.equal(ok.agent.listen, "off");
  assert.deepEqual(ok.connect.scopes, ["*"]);
});

test("dialling again waits 1 s doubling to 60 s, each wait between half and all of its step", () => {
  const steps = [1, 2, 3, 4, 5, 6, 7, 8, 20].map((n) => [
    redialDelay(n, undefined, () => 0),
    redialDelay(n, undefined, () => 1),
  ]);
  assert.deepEqual(steps, [
    [500, 1000],
    [1000, 2000],
    [2000, 4000],
    [4000, 8000],
    [8000, 16_000],
    [16_000, 32_000],
    [30_000, 60_000],
    [30_000, 60_000],
    [30_000, 60_000],
  ]);
});
