import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { projectRoot } from "../../src/paths.js";
import { processStartTime } from "../../src/util/processes.js";
import { freePort } from "../../support/loopback.js";
import { TEST_SECRET, TEST_TOKEN } from "../helpers/app.js";
import { startArtifactServer } from "../helpers/artifact-servers.js";
import { startCaddy } from "../helpers/caddy.js";
import { type ReceivedWebhook, startReceiver, verifyStandardWebhook, viaProxy } from "../helpers/http.js";
import { makeTestCa } from "../helpers/tls.js";
import { waitFor } from "../helpers/wait.js";
import { distinctCallbacks, fakeArtifact, instanceReaper, publish } from "./support.js";

const DOMAIN = "operator-restart.test";

/** The parts of the agent's answers this test reads. */
interface Answer {
  state: string;
  version: string;
  slot: string;
  pid: number;
  error: { code: string };
  history: { state: string }[];
}

test("the agent killed with SIGKILL mid-update finishes or undoes the update when it starts again", {
  timeout: 120_000,
}, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-restart-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const ca = makeTestCa(dir);
  const artifacts = await startArtifactServer(t, ca);
  const caddy = await startCaddy(t);
  // The first delivery of r3's `draining` callback is left unanswered until the agent sending it is killed.
  let release = () => {};
  const cut = new Promise<void>((r) => {
    release = r;
  });
  t.after(() => release());
  let held: ReceivedWebhook | undefined;
  const receiver = await startReceiver(t, {
    hold: (w) => {
      if (held || w.json.data.update_process_id !== "r3" || w.json.data.state !== "draining")
        return undefined;
      held = w;
      return cut;
    },
  });
  const reaper = instanceReaper(t);
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "",
    NODE_EXTRA_CA_CERTS: ca.caFile,
    HOSTKEEPER_DATA_DIR: join(dir, "data"),
    HOSTKEEPER_TOKEN: TEST_TOKEN,
    HOSTKEEPER_WEBHOOK_SECRET: TEST_SECRET,
    HOSTKEEPER_LOG_LEVEL: "warn",
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    // Plain HTTP on the test Caddy's server, as it was made (`startCaddy`).
    HOSTKEEPER_TLS_ISSUER: "off",
    HOSTKEEPER_OPERATOR_DOMAIN: DOMAIN,
    HOSTKEEPER_OPERATOR_PORTS: `${await freePort()},${await freePort()}`,
    HOSTKEEPER_OPERATOR_ENV: reaper.env,
    HOSTKEEPER_OPERATOR_CHECK_INTERVAL_MS: "50",
    HOSTKEEPER_OPERATOR_HEALTH_TIMEOUT_MS: "20000",
    HOSTKEEPER_OPERATOR_WATCH_MS: "1500",
    HOSTKEEPER_OPERATOR_DRAIN_MS: "200",
    HOSTKEEPER_OPERATOR_STOP_TIMEOUT_MS: "2000",
  };

  /** Runs the agent (`hostkeeper serve`) as a child; killed by its PID when the test ends if still running. */
  const startAgent = async () => {
    const port = await freePort();
    const log = openSync(join(dir, "agent.log"), "a");
    const child = spawn(process.execPath, [join(projectRoot(), "dist/src/cli/main.js"), "serve"], {
      env: { ...env, HOSTKEEPER_LISTEN: `127.0.0.1:${port}` },
      stdio: ["ignore", log, log],
    });
    closeSync(log);
    const exited = new Promise((r) => child.once("exit", r));
    const kill = async () => {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid as number, "SIGKILL");
      await exited;
    };
    t.after(kill);
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`http://127.0.0.1:${port}${path}`, {
        method,
        signal: AbortSignal.timeout(10_000),
        headers: { authorization: `Bearer ${TEST_TOKEN}`, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.status, body: (await res.json()) as Answer };
    };
    await waitFor("the agent to listen", async () =>
      (await api("GET", "/v1/operator/update/x")).status ? true : undefined,
    );
    return { api, kill };
  };

  publish(artifacts.files, "/rel", "1", fakeArtifact("v1"));
  publish(artifacts.files, "/rel", "2", fakeArtifact("v2-sick", "unhealthy"));
  publish(artifacts.files, "/rel", "3", fakeArtifact("v3"));
  const request = (id: string, version: string) => ({
    callback_url: receiver.url,
    update_process_id: id,
    version,
    artifact_source: `${artifacts.url}/rel`,
  });
  const state = async (agent: Awaited<ReturnType<typeof startAgent>>, id: string) =>
    (await agent.api("GET", `/v1/operator/update/${id}`)).body;
  const serving = async () => (await viaProxy(caddy.httpPort, DOMAIN)).body;

  const first = await startAgent();
  assert.equal((await first.api("POST", "/v1/operator/update", request("r1", "1"))).status, 202);
  await waitFor("v1 installed", async () =>
    (await state(first, "r1")).state === "completed" ? true : undefined,
  );
  const v1 = (await first.api("GET", "/v1/operator/running-instance")).body;
  assert.equal(v1.version, "1");

  let second = first;
  await t.test("killed while the new instance is health-checked: the update is undone", async () => {
    assert.equal((await first.api("POST", "/v1/operator/update", request("r2", "2"))).status, 202);
    await waitFor("the health gate", async () =>
      (await state(first, "r2")).state === "health_checking" ? true : undefined,
    );
    await waitFor("the new instance", () => (reaper.alive().length === 2 ? true : undefined));
    const sick = reaper.alive().find((pid) => pid !== v1.pid) as number;
    await first.kill();
    assert.equal(await serving(), "v1", "instances outlive the agent");

    second = await startAgent();
    const s = await waitFor("the undo", async () => {
      const r = await state(second, "r2");
      return r.state === "failed" ? r : undefined;
    });
    assert.equal(s.error.code, "agent_restarted");
    assert.deepEqual(
      s.history.map((h) => h.state),
      ["queued", "downloading", "verifying", "starting", "health_checking", "failed"],
    );
    assert.equal(processStartTime(sick), undefined, "the half-started instance is stopped");
    const running = (await second.api("GET", "/v1/operator/running-instance")).body;
    assert.equal(running.pid, v1.pid, "the running v1 instance was adopted, not restarted");
    assert.equal(await serving(), "v1");
  });

  await t.test("killed while draining after the switch: the update is finished", async () => {
    assert.equal((await second.api("POST", "/v1/operator/update", request("r3", "3"))).status, 202);
    await waitFor("the switch", async () =>
      (await state(second, "r3")).state === "draining" ? true : undefined,
    );
    await waitFor("the draining callback, unanswered", () => (held ? true : undefined));
    await second.kill();
    release();
    assert.equal(await serving(), "v3");

    const third = await startAgent();
    const done = await waitFor("the finish", async () => {
      const r = await state(third, "r3");
      return r.state === "completed" ? r : undefined;
    });
    assert.deepEqual(
      done.history.map((h) => h.state),
      [
        "queued",
        "downloading",
        "verifying",
        "starting",
        "health_checking",
        "switching",
        "draining",
        "completed",
      ],
    );
    const now = (await third.api("GET", "/v1/operator/running-instance")).body;
    assert.equal(now.version, "3");
    assert.equal(now.slot, "green");
    assert.equal(processStartTime(v1.pid), undefined, "the old instance is stopped");
    assert.deepEqual(reaper.alive(), [now.pid], "exactly one instance runs");
    assert.equal(await serving(), "v3");

    // The outbox is durable: every state of every update is delivered, in order, across the restarts, at
    // least once. The `draining` callback the second agent was sending when it was killed (the receiver had
    // it, the agent never saw the answer) comes again from the third agent, as the same event under the same
    // webhook-id. Any other attempt a kill cut short may come twice as well: at most once per kill, since one
    // update's callbacks go one at a time, and right after its first delivery.
    for (const id of ["r1", "r2", "r3"]) {
      const history = (await state(third, id)).history.map((h) => h.state);
      const { events, repeats } = await waitFor(`callbacks of ${id}`, () => {
        const d = distinctCallbacks(receiver.received.filter((w) => w.json.data.update_process_id === id));
        return d.events.length >= history.length ? d : undefined;
      });
      assert.deepEqual(
        events.map((w) => w.json.data.state),
        history,
        id,
      );
      assert.equal(new Set(events.map((w) => w.headers["webhook-id"])).size, events.length, id);
      for (const r of repeats) assert.equal(r.again.body, r.first.body, `${id}: a repeat is the same event`);
      if (id === "r3")
        assert.deepEqual(
          repeats.map((r) => r.again.json.data.state),
          ["draining"],
          "r3: the cut delivery is made again",
        );
      else assert.ok(repeats.length <= 2, `${id}: at most one repeat per kill`);
      assert.ok(
        [...events, ...repeats.map((r) => r.again)].every((w) => verifyStandardWebhook(TEST_SECRET, w)),
      );
    }
  });
});
