import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { freePort } from "../../support/loopback.js";
import { buildTestApp } from "../helpers/app.js";
import { startArtifactServer } from "../helpers/artifact-servers.js";
import { startCaddy } from "../helpers/caddy.js";
import { startReceiver, viaProxy } from "../helpers/http.js";
import { makeTestCa } from "../helpers/tls.js";
import { waitFor } from "../helpers/wait.js";
import { fakeArtifact, instanceReaper, publish } from "./support.js";

type After = { after: (fn: () => unknown) => void };

const DOMAIN = "operator-sync.test";
const CHECK_INTERVAL_MS = 50;

/**
 * A loopback HTTP proxy in front of Caddy's admin API. While held, it takes requests in but passes them on
 * only when released, so an admin request the agent sends then stays in flight. `onHeldAnswer` runs when
 * Caddy's answer to such a request comes back, before the agent has it.
 */
async function startAdminGate(t: After, adminUrl: string, onHeldAnswer: () => void) {
  const target = new URL(adminUrl);
  let released: Promise<void> | undefined;
  let release = () => {};
  let waiting = 0;
  const server = http.createServer(async (req, res) => {
    const held = released !== undefined;
    if (released) {
      waiting++;
      await released;
      waiting--;
    }
    const headers = { ...req.headers, host: target.host };
    const forward = http.request(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers, agent: false },
      (answer) => {
        if (held) onHeldAnswer();
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    forward.on("error", () => res.destroy());
    req.pipe(forward);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => {
    release();
    server.closeAllConnections();
    return new Promise((r) => server.close(r));
  });
  const address = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${address.port}`,
    hold: () => {
      released = new Promise((r) => {
        release = () => {
          released = undefined;
          r();
        };
      });
    },
    release: () => release(),
    waiting: () => waiting,
  };
}

test("a route sync under way when an update switches ends before the switch points the route", {
  timeout: 120_000,
}, async (t) => {
  const caddy = await startCaddy(t);
  // Where the upstream file pointed each time Caddy answered a held admin request.
  const atHeldAnswers: string[] = [];
  const gate = await startAdminGate(t, caddy.adminUrl, () => atHeldAnswers.push(upstream()));
  const dir = mkdtempSync(join(tmpdir(), "hk-op-sync-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const ca = makeTestCa(dir);
  const artifacts = await startArtifactServer(t, ca);
  const receiver = await startReceiver(t);
  const reaper = instanceReaper(t);
  const ports = { blue: await freePort(), green: await freePort() };
  const env = {
    HOSTKEEPER_CADDY_ADMIN: gate.url,
    // Long enough that the held admin request is still waiting when the test releases it.
    HOSTKEEPER_CADDY_TIMEOUT_MS: "20000",
    HOSTKEEPER_OPERATOR_DOMAIN: DOMAIN,
    HOSTKEEPER_OPERATOR_PORTS: `${ports.blue},${ports.green}`,
    HOSTKEEPER_OPERATOR_CA_FILE: ca.caFile,
    HOSTKEEPER_OPERATOR_ENV: reaper.env,
    HOSTKEEPER_OPERATOR_CHECK_INTERVAL_MS: String(CHECK_INTERVAL_MS),
    HOSTKEEPER_OPERATOR_HEALTH_TIMEOUT_MS: "1500",
    HOSTKEEPER_OPERATOR_WATCH_MS: "1000",
    HOSTKEEPER_OPERATOR_DRAIN_MS: "300",
    HOSTKEEPER_OPERATOR_STOP_TIMEOUT_MS: "2000",
  };
  const dataDir = join(dir, "data");
  const upstream = () => readFileSync(join(dataDir, "operator", "upstream"), "utf8");
  const serving = async () => (await viaProxy(caddy.httpPort, DOMAIN)).body;
  const request = (id: string, version: string) => ({
    callback_url: receiver.url,
    update_process_id: id,
    version,
    artifact_source: `${artifacts.url}/rel`,
  });
  publish(artifacts.files, "/rel", "1", fakeArtifact("v1"));
  publish(artifacts.files, "/rel", "2", fakeArtifact("v2"));

  // The first agent installs v1 into blue, then stops; v1 keeps running.
  const closers: (() => unknown)[] = [];
  const closeFirst = async () => {
    for (const close of closers.splice(0)) await close();
  };
  t.after(closeFirst);
  const first = await buildTestApp({ after: (fn: () => unknown) => closers.push(fn) }, env, { dataDir });
  await first.call({ method: "POST", url: "/v1/operator/update", payload: request("install", "1") });
  await waitFor("v1 installed", async () => {
    const res = await first.call({ method: "GET", url: "/v1/operator/update/install" });
    return res.json().state === "completed" ? true : undefined;
  });
  await closeFirst();
  assert.equal(upstream(), `127.0.0.1:${ports.blue}`);

  // A starting agent puts the operator's route again on its own; that sync is held at Caddy's admin API.
  gate.hold();
  const second = await buildTestApp(t, env, { dataDir });
  const state = async (id: string) =>
    (await second.call({ method: "GET", url: `/v1/operator/update/${id}` })).json() as {
      state: string;
      error: unknown;
    };
  await waitFor("the agent's own route sync to reach Caddy", () => (gate.waiting() > 0 ? true : undefined));

  await second.call({ method: "POST", url: "/v1/operator/update", payload: request("upgrade", "2") });
  await waitFor("the switch", async () =>
    (await state("upgrade")).state === "switching" ? true : undefined,
  );
  assert.equal((await state("upgrade")).state, "switching", "the switch waits for the sync under way");
  assert.equal(upstream(), `127.0.0.1:${ports.blue}`, "nothing has pointed the route at green yet");
  assert.equal(await serving(), "v1");

  gate.release();
  await waitFor("the drain", async () => ((await state("upgrade")).state === "draining" ? true : undefined));
  // The order itself, rather than a pause in which a switch that did not wait would have written: the sync
  // under way had its answer from Caddy while the upstream file still named blue.
  assert.ok(atHeldAnswers.length > 0, "the held sync was answered");
  for (const at of atHeldAnswers)
    assert.equal(
      at,
      `127.0.0.1:${ports.blue}`,
      "the sync under way ended before the switch pointed the route",
    );
  assert.equal(upstream(), `127.0.0.1:${ports.green}`);
  assert.equal(await serving(), "v2", "the route points at the new instance, not the draining one");
  const done = await waitFor("the end of the update", async () => {
    const s = await state("upgrade");
    return s.state === "completed" || s.state === "failed" || s.state === "rolled_back" ? s : undefined;
  });
  assert.equal(done.state, "completed", JSON.stringify(done.error));
  assert.equal(upstream(), `127.0.0.1:${ports.green}`);
  assert.equal(await serving(), "v2");
});
