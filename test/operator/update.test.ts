import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { processStartTime } from "../../src/util/processes.js";
import { freePort } from "../../support/loopback.js";
import { buildTestApp, TEST_SECRET } from "../helpers/app.js";
import { startArtifactServer } from "../helpers/artifact-servers.js";
import { startCaddy } from "../helpers/caddy.js";
import { startReceiver, verifyStandardWebhook, viaProxy } from "../helpers/http.js";
import { makeTestCa } from "../helpers/tls.js";
import { waitFor } from "../helpers/wait.js";
import { scrape, value } from "../metrics/support.js";
import { fakeArtifact, instanceReaper, publish, startLoad } from "./support.js";

const DOMAIN = "operator.test";
const FINAL = ["completed", "failed", "rolled_back"];

interface Status {
  update_process_id: string;
  artifact_source: string;
  version: string;
  state: string;
  progress: { bytes_downloaded: number; bytes_total: number | null };
  previous_instance: { slot: string; version: string } | null;
  new_instance: { slot: string; version: string } | null;
  error: { code: string; message: string } | null;
  history: { state: string; at: string }[];
  links: { status: string };
}

test("operator self-update through a real Caddy", { timeout: 120_000 }, async (t) => {
  const caddy = await startCaddy(t);
  const dir = mkdtempSync(join(tmpdir(), "hk-op-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const ca = makeTestCa(dir);
  const artifacts = await startArtifactServer(t, ca);
  const receiver = await startReceiver(t);
  const reaper = instanceReaper(t);
  const ports = { blue: await freePort(), green: await freePort() };
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_OPERATOR_DOMAIN: DOMAIN,
    HOSTKEEPER_OPERATOR_PORTS: `${ports.blue},${ports.green}`,
    HOSTKEEPER_OPERATOR_CA_FILE: ca.caFile,
    HOSTKEEPER_OPERATOR_COMMUNITY_SOURCE: `${artifacts.url}/releases`,
    HOSTKEEPER_OPERATOR_ENV: reaper.env,
    HOSTKEEPER_OPERATOR_CHECK_INTERVAL_MS: "50",
    HOSTKEEPER_OPERATOR_HEALTH_TIMEOUT_MS: "1500",
    HOSTKEEPER_OPERATOR_WATCH_MS: "1500",
    HOSTKEEPER_OPERATOR_DRAIN_MS: "300",
    HOSTKEEPER_OPERATOR_STOP_TIMEOUT_MS: "2000",
    HOSTKEEPER_OPERATOR_DOWNLOAD_RETRIES: "2",
    HOSTKEEPER_OPERATOR_RETRY_DELAY_MS: "20",
    HOSTKEEPER_OPERATOR_RESTART_BACKOFF_MS: "100",
  });
  const source = `${artifacts.url}/releases`;
  const post = (body: Record<string, unknown>) =>
    call({ method: "POST", url: "/v1/operator/update", payload: body });
  const request = (id: string, version: string, extra: Record<string, unknown> = {}) => ({
    callback_url: receiver.url,
    update_process_id: id,
    version,
    artifact_source: source,
    ...extra,
  });
  const status = async (id: string) =>
    (await call({ method: "GET", url: `/v1/operator/update/${id}` })).json() as Status;
  const finished = (id: string, ms = 15_000) =>
    waitFor(
      `update ${id} to finish`,
      async () => {
        const s = await status(id);
        return FINAL.includes(s.state) ? s : undefined;
      },
      ms,
    );
  const running = async () => {
    const res = await call({ method: "GET", url: "/v1/operator/running-instance" });
    return { code: res.statusCode, body: res.json() };
  };
  const serving = async () => (await viaProxy(caddy.httpPort, DOMAIN)).body;
  const alive = (pid: number) => processStartTime(pid) !== undefined;

  await t.test("running-instance is a 503 problem before the first install", async () => {
    const r = await running();
    assert.equal(r.code, 503);
    assert.equal(r.body.code, "running_instance_unavailable");
  });

  let v1Pid = 0;
  await t.test(
    "the first install (from the community source) goes into blue and gets the route",
    async () => {
      publish(artifacts.files, "/releases", "1.0.0", fakeArtifact("v1"));
      const res = await post({ ...request("install-1", "1.0.0"), artifact_source: null });
      assert.equal(res.statusCode, 202);
      const accepted = res.json() as Status;
      assert.equal(accepted.update_process_id, "install-1");
      assert.equal(accepted.state, "queued");
      assert.equal(accepted.links.status, "/v1/operator/update/install-1");
      assert.equal(res.headers.location, "/v1/operator/update/install-1");

      const done = await finished("install-1");
      assert.equal(done.state, "completed", JSON.stringify(done.error));
      const counted = await scrape({ call });
      assert.equal(value(counted, "hostkeeper_operator_updates_total", { state: "completed" }), 1);
      assert.equal(
        value(counted, "hostkeeper_operator_updates_total"),
        1,
        "one update reached a final state",
      );
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
      assert.equal(done.artifact_source, source, "the community source");
      assert.equal(done.previous_instance, null);
      assert.deepEqual(done.new_instance, { slot: "blue", version: "1.0.0" });
      assert.equal(done.progress.bytes_downloaded, fakeArtifact("v1").length);
      assert.equal(done.progress.bytes_total, fakeArtifact("v1").length);

      const r = await running();
      assert.equal(r.code, 200);
      assert.equal(r.body.slot, "blue");
      assert.equal(r.body.version, "1.0.0");
      assert.equal(r.body.port, ports.blue);
      assert.equal(r.body.update_process_id, "install-1");
      assert.equal(r.body.health.status, "healthy");
      v1Pid = r.body.pid;
      const status = (await call({ method: "GET", url: "/v1/status" })).json();
      assert.deepEqual(status.operator.active_instance, {
        slot: "blue",
        version: "1.0.0",
        port: ports.blue,
        pid: v1Pid,
        running: true,
        started_at: r.body.started_at,
        update_process_id: "install-1",
      });
      assert.equal(await serving(), "v1");
      const health = JSON.parse((await viaProxy(caddy.httpPort, DOMAIN, "/health")).body);
      assert.deepEqual(health, {
        version: "v1",
        slot: "blue",
        env_version: "1.0.0",
        port: String(ports.blue),
      });
    },
  );

  const keepsV1 = async (s: Status, state: string, code: string) => {
    assert.equal(s.state, state, JSON.stringify(s));
    assert.equal(s.error?.code, code, s.error?.message);
    assert.equal(await serving(), "v1");
    const r = await running();
    assert.equal(r.body.slot, "blue");
    assert.equal(r.body.version, "1.0.0");
    assert.deepEqual(reaper.alive(), [r.body.pid], "only the v1 instance runs");
  };

  await t.test("a checksum mismatch fails before anything starts; v1 keeps serving", async () => {
    publish(artifacts.files, "/releases", "2.0.0-bad", fakeArtifact("v2-bad"));
    const res = await post(request("bad-sum", "2.0.0-bad", { checksum: `sha256:${"0".repeat(64)}` }));
    assert.equal(res.statusCode, 202);
    const s = await finished("bad-sum");
    await keepsV1(s, "failed", "checksum_mismatch");
    assert.deepEqual(
      s.history.map((h) => h.state),
      ["queued", "downloading", "verifying", "failed"],
    );
  });

  await t.test("no checksum and no SHA256SUMS: the update fails without downloading the binary", async () => {
    publish(artifacts.files, "/releases", "2.0.0-nosums", fakeArtifact("v2"), { sums: false });
    await post(request("no-sums", "2.0.0-nosums"));
    await keepsV1(await finished("no-sums"), "failed", "checksum_unavailable");
    assert.equal(artifacts.requests.filter((r) => r.path === "/releases/2.0.0-nosums/operator").length, 0);
  });

  await t.test("a download that always breaks off is retried, resumed with Range, then fails", async () => {
    publish(artifacts.files, "/releases", "2.0.0-cut", fakeArtifact("v2"), { behaviour: "truncate" });
    await post(request("truncated", "2.0.0-cut"));
    const s = await finished("truncated");
    await keepsV1(s, "failed", "download_failed");
    const tries = artifacts.requests.filter((r) => r.path === "/releases/2.0.0-cut/operator");
    assert.equal(tries.length, 3, "one attempt and two retries");
    assert.equal(tries[0]?.headers.range, undefined);
    assert.match(String(tries[1]?.headers.range), /^bytes=\d+-$/);
    assert.ok(tries[1]?.headers["if-range"], "a resumed request carries If-Range");
  });

  await t.test("an unhealthy new version (downloaded after one resume) fails the health gate", async () => {
    publish(artifacts.files, "/releases", "2.0.0-sick", fakeArtifact("v2-sick", "unhealthy"), {
      behaviour: "truncate-once",
    });
    await post(request("unhealthy", "2.0.0-sick"));
    const s = await finished("unhealthy");
    await keepsV1(s, "failed", "health_check_failed");
    assert.deepEqual(
      artifacts.requests.filter((r) => r.path === "/releases/2.0.0-sick/operator").map((r) => r.status),
      [200, 206],
      "the broken-off download was resumed",
    );
    assert.ok(s.history.some((h) => h.state === "health_checking"));
    assert.ok(!s.history.some((h) => h.state === "switching"), "the route was never switched");
  });

  await t.test("a new version dying after the switch is rolled back to v1", async () => {
    publish(artifacts.files, "/releases", "2.0.0-dies", fakeArtifact("v2-dies", "exit-on-traffic"));
    await post(request("dies", "2.0.0-dies"));
    await waitFor("the switch", async () => ((await status("dies")).state === "draining" ? true : undefined));
    assert.equal(await serving(), "v2-dies", "the route points at the new instance");
    const s = await finished("dies");
    await keepsV1(s, "rolled_back", "new_instance_failed");
    assert.deepEqual(s.history.map((h) => h.state).slice(-3), ["switching", "draining", "rolled_back"]);
  });

  await t.test("a crashed active instance is restarted", async () => {
    const before = (await running()).body.pid as number;
    process.kill(-before, "SIGKILL");
    const after = await waitFor("a restarted v1", async () => {
      const r = await running();
      return r.code === 200 && r.body.pid !== before ? r.body : undefined;
    });
    assert.equal(after.slot, "blue");
    assert.equal(await serving(), "v1");
    v1Pid = after.pid;
  });

  await t.test("v1 -> v2 under continuous requests through Caddy: zero failed requests", async () => {
    publish(artifacts.files, "/releases", "2.0.0", fakeArtifact("v2"));
    const load = startLoad(caddy.httpPort, DOMAIN);
    await waitFor("traffic", () => (load.results.length > 20 ? true : undefined));
    const body = request("upgrade", "2.0.0");
    const res = await post(body);
    assert.equal(res.statusCode, 202);

    const again = await post(body);
    assert.equal(again.statusCode, 202, "the same id and body is idempotent");
    assert.equal((again.json() as Status).update_process_id, "upgrade");
    const changed = await post({ ...body, checksum: "a".repeat(64) });
    assert.equal(changed.statusCode, 409);
    assert.equal(changed.json().code, "update_id_conflict");
    const other = await post(request("other", "2.0.0"));
    assert.equal(other.statusCode, 409);
    assert.equal(other.json().code, "update_in_progress");
    assert.equal(other.json().update_process_id, "upgrade");
    assert.equal(other.headers["content-type"], "application/problem+json; charset=utf-8");

    const s = await finished("upgrade");
    const doneAt = Date.now();
    await waitFor("traffic after the update", () =>
      load.results.filter((r) => r.at > doneAt).length > 20 ? true : undefined,
    );
    const results = await load.stop();
    assert.equal(s.state, "completed", JSON.stringify(s.error));
    const failed = results.filter((r) => r.status !== 200);
    assert.deepEqual(
      failed,
      [],
      `${failed.length} of ${results.length} requests failed; ${JSON.stringify(s.history.map((h) => [h.state, Date.parse(h.at)]))}`,
    );
    assert.ok(results.some((r) => r.body === "v1") && results.some((r) => r.body === "v2"));
    assert.ok(results.filter((r) => r.at > doneAt).every((r) => r.body === "v2"));
    assert.deepEqual(s.previous_instance, { slot: "blue", version: "1.0.0" });
    assert.deepEqual(s.new_instance, { slot: "green", version: "2.0.0" });

    const r = await running();
    assert.equal(r.body.slot, "green");
    assert.equal(r.body.port, ports.green);
    assert.equal(r.body.update_process_id, "upgrade");
    assert.ok(!alive(v1Pid), "the old instance is stopped");
    assert.deepEqual(reaper.alive(), [r.body.pid]);
    const again2 = await post(body);
    assert.equal(
      (again2.json() as Status).state,
      "completed",
      "a repeat after the end answers the final status",
    );
  });

  await t.test("callbacks: one signed operator_update per state change, in order", async () => {
    for (const id of ["install-1", "bad-sum", "no-sums", "truncated", "unhealthy", "dies", "upgrade"]) {
      const s = await status(id);
      await waitFor(`callbacks of ${id}`, () => {
        const got = receiver.received.filter((w) => w.json.data.update_process_id === id);
        return got.length >= s.history.length ? got : undefined;
      }).then((got) => {
        assert.deepEqual(
          got.map((w) => w.json.data.state),
          s.history.map((h) => h.state),
          id,
        );
        for (const w of got) {
          assert.equal(w.json.type, "operator_update");
          assert.ok(verifyStandardWebhook(TEST_SECRET, w), "valid Standard Webhooks signature");
        }
        assert.equal(new Set(got.map((w) => w.headers["webhook-id"])).size, got.length);
      });
    }
  });

  await t.test("404 for an unknown update id", async () => {
    const res = await call({ method: "GET", url: "/v1/operator/update/nope" });
    assert.equal(res.statusCode, 404);
    assert.equal(res.json().code, "update_not_found");
  });
});
