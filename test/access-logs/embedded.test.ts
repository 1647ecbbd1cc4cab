import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { lastLines } from "../../src/access-logs/files.js";
import { embeddedEnv, readyz, TOKEN } from "../health/support.js";
import { proxyExchange, sentAgainOnReset } from "../helpers/http.js";
import { alive, caddyPid, request, startAgent } from "../helpers/serve.js";
import { waitFor } from "../helpers/wait.js";
import { cookieUpstream, write } from "./support.js";

test("with the embedded Caddy the logs are under <data dir>/caddy/access-logs, none in caddy.log, and survive a Caddy restart", async (t) => {
  // Plain HTTP on the loopback port, and no certificate sought for the test's hosts (Caddy would take the
  // port for HTTPS and ask a public CA).
  const { env, dataDir, httpPort } = await embeddedEnv(t, { HOSTKEEPER_TLS_ISSUER: "off" });
  const agent = await startAgent(t, env);
  const port = await cookieUpstream(t);
  const api = (method: string, path: string, body?: unknown) =>
    request(agent.port, method, path, TOKEN, body);
  const send = (host: string, path: string) =>
    sentAgainOnReset(() => proxyExchange(httpPort, host, { path }));
  assert.equal(
    (await api("POST", "/v1/proxy/routes", write("a.emb.test", port, { access_log: true }))).status,
    201,
  );
  assert.equal((await api("POST", "/v1/proxy/routes", write("b.emb.test", port))).status, 201);
  await send("a.emb.test", "/a1");
  await send("b.emb.test", "/b1");
  await send("c.emb.test", "/c1");
  const file = join(dataDir, "caddy", "access-logs", "a.emb.test.log");
  await waitFor("a.emb.test's entry", async () =>
    (await lastLines(file, 10)).length === 1 ? true : undefined,
  ).catch((err) => {
    throw new Error(
      `${err}\n${agent.log().slice(-6000)}\n${readFileSync(join(dataDir, "caddy", "caddy.log"), "utf8").slice(-3000)}`,
    );
  });

  const before = caddyPid(dataDir);
  assert.ok(before !== undefined && alive(before));
  process.kill(before, "SIGKILL");
  await waitFor(
    "another Caddy",
    async () => {
      const pid = caddyPid(dataDir);
      return pid !== undefined && pid !== before && alive(pid) && (await readyz(agent.port)).status === 200
        ? pid
        : undefined;
    },
    20_000,
  );
  const asked = await api("GET", "/v1/proxy/routes/a.emb.test/request");
  assert.equal(JSON.parse(asked.body).access_log, true, asked.body);
  await send("a.emb.test", "/a2");
  await send("b.emb.test", "/b2");
  const tail = await waitFor("both entries through the API", async () => {
    const r = await api("GET", "/v1/proxy/routes/a.emb.test/access-log");
    const entries = JSON.parse(r.body) as { request: { uri: string } }[];
    return entries.length === 2 ? entries : undefined;
  });
  assert.deepEqual(
    tail.map((e) => e.request.uri),
    ["/a1", "/a2"],
  );
  // Caddy's own log has its own lines, and no request's.
  const caddyLog = readFileSync(join(dataDir, "caddy", "caddy.log"), "utf8");
  assert.ok(caddyLog.length > 0);
  assert.equal(caddyLog.includes("http.log.access"), false);
  assert.equal(caddyLog.includes('"uri":"/b'), false);
});
