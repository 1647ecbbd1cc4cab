import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { freePort } from "../../support/loopback.js";
import { startArtifactServer } from "../helpers/artifact-servers.js";
import { makeTestCa } from "../helpers/tls.js";
import { waitFor } from "../helpers/wait.js";
import { fakeArtifact, instanceReaper, publish } from "../operator/support.js";
import { problemLine, runCli, startCliAgent } from "./support.js";

const DOMAIN = "operator.cli.test";

/** The `key  value` lines of a block, up to the first blank line. */
const block = (text: string) =>
  Object.fromEntries(
    text
      .split("\n\n")[0]
      ?.split("\n")
      .map((l) => l.split(/ {2,}/)) ?? [],
  );

describe("operator status", () => {
  test("nothing installed, and an unknown update: the API's problems in one line", async (t) => {
    const agent = await startCliAgent(t, { HOSTKEEPER_OPERATOR_DOMAIN: DOMAIN });
    const none = await runCli(["operator", "status"], agent.env);
    assert.equal(none.code, 1);
    assert.equal(problemLine(none.stderr).code, "running_instance_unavailable");
    const unknown = await runCli(["operator", "status", "upd-none"], agent.env);
    assert.equal(unknown.code, 1);
    assert.equal(problemLine(unknown.stderr).code, "update_not_found");
  });

  test("after an install: the running instance and the update's states", { timeout: 60_000 }, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), "hk-cli-op-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const ca = makeTestCa(dir);
    const artifacts = await startArtifactServer(t, ca);
    const reaper = instanceReaper(t);
    publish(artifacts.files, "/rel", "1.0.0", fakeArtifact("1.0.0"));
    const agent = await startCliAgent(t, {
      HOSTKEEPER_OPERATOR_DOMAIN: DOMAIN,
      HOSTKEEPER_OPERATOR_PORTS: `${await freePort()},${await freePort()}`,
      HOSTKEEPER_OPERATOR_CA_FILE: ca.caFile,
      HOSTKEEPER_OPERATOR_ENV: reaper.env,
      HOSTKEEPER_OPERATOR_CHECK_INTERVAL_MS: "50",
      HOSTKEEPER_OPERATOR_WATCH_MS: "300",
      HOSTKEEPER_OPERATOR_DRAIN_MS: "100",
      HOSTKEEPER_OPERATOR_STOP_TIMEOUT_MS: "2000",
    });
    const started = await agent.call({
      method: "POST",
      url: "/v1/operator/update",
      payload: {
        callback_url: "http://127.0.0.1:9/hook",
        update_process_id: "upd-cli-1",
        version: "1.0.0",
        artifact_source: `${artifacts.url}/rel`,
      },
    });
    assert.equal(started.statusCode, 202, started.body);
    await waitFor(
      "the install to complete",
      async () => {
        const r = await runCli(["operator", "status", "upd-cli-1", "--json"], agent.env);
        const state = JSON.parse(r.stdout).state;
        return ["completed", "failed", "rolled_back"].includes(state) ? state : undefined;
      },
      30_000,
    );

    const update = await runCli(["operator", "status", "upd-cli-1"], agent.env);
    assert.equal(update.code, 0, update.stderr);
    const u = block(update.stdout);
    assert.equal(u.update, "upd-cli-1");
    assert.equal(u.state, "completed");
    assert.equal(u["new instance"], "1.0.0 (blue)");
    assert.equal(u.error, "-");
    const history = update.stdout.split("\n\n")[1]?.trimEnd().split("\n") ?? [];
    assert.match(history[0] ?? "", /^STATE +AT$/);
    assert.deepEqual(
      history.slice(1).map((l) => l.split(/ +/)[0]),
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

    const running = await runCli(["operator", "status"], agent.env);
    assert.equal(running.code, 0, running.stderr);
    const i = block(running.stdout);
    assert.equal(i.slot, "blue");
    assert.equal(i.version, "1.0.0");
    assert.match(i.health ?? "", /^healthy \(checked \S+\)$/);
    assert.equal(i["installed by"], "upd-cli-1");

    const status = await runCli(["status"], agent.env);
    assert.equal(status.code, 0, status.stderr);
    // Its process runs; its health is what `operator status` checks.
    assert.match(status.stdout, /^operator +1\.0\.0 \(blue\), pid \d+, port \d+, running$/m);
  });
});
