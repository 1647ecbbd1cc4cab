import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { projectRoot } from "../../src/paths.js";
import { processStartTime } from "../../src/util/processes.js";
import type { TestApp } from "../helpers/app.js";
import type { HostedFile } from "../helpers/artifact-servers.js";
import { proxyRequest, type ReceivedWebhook } from "../helpers/http.js";
import { waitFor } from "../helpers/wait.js";

type After = { after: (fn: () => unknown) => void };

const FAKE_OPERATOR = join(projectRoot(), "test/operator/fixtures/fake-operator.mjs");

export type FakeMode = "ok" | "unhealthy" | "exit-on-traffic";

/** An operator artifact: an executable script that runs the fake operator as `version` in `mode`. */
export function fakeArtifact(version: string, mode: FakeMode = "ok"): Buffer {
  return Buffer.from(
    [
      `#!${process.execPath}`,
      `process.env.FAKE_VERSION = ${JSON.stringify(version)};`,
      `process.env.FAKE_MODE = ${JSON.stringify(mode)};`,
      `import(${JSON.stringify(pathToFileURL(FAKE_OPERATOR).href)});`,
      "",
    ].join("\n"),
  );
}

export const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

/**
 * Puts a release into `files` the way the agent looks for it: `<prefix>/<version>/operator` and, unless
 * `sums` is false, `<prefix>/<version>/SHA256SUMS` (listing `sums` when it is a string, else the real hash).
 */
export function publish(
  files: Map<string, HostedFile>,
  prefix: string,
  version: string,
  artifact: Buffer,
  opts: { sums?: boolean | string; behaviour?: HostedFile["behaviour"] } = {},
): void {
  files.set(`${prefix}/${version}/operator`, { body: artifact, behaviour: opts.behaviour ?? "ok" });
  if (opts.sums === false) return;
  const hex = typeof opts.sums === "string" ? opts.sums : sha256(artifact);
  files.set(`${prefix}/${version}/SHA256SUMS`, {
    body: Buffer.from(`${sha256(Buffer.from("other"))}  other-tool\n${hex}  operator\n`),
  });
}

/**
 * Every fake operator records its PID and start time in `dir` (passed to it through
 * HOSTKEEPER_OPERATOR_ENV); when the test ends each still-running one is killed by its process group.
 */
export function instanceReaper(t: After): { dir: string; env: string; alive: () => number[] } {
  const dir = mkdtempSync(join(tmpdir(), "hk-pids-"));
  const recorded = () =>
    readdirSync(dir).map((f) => ({ pid: Number(f), start: readFileSync(join(dir, f), "utf8").trim() }));
  const alive = () => recorded().filter((p) => processStartTime(p.pid) === p.start);
  t.after(() => {
    for (const p of alive()) {
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {
        // gone in between
      }
    }
    rmSync(dir, { recursive: true, force: true });
  });
  return { dir, env: JSON.stringify({ FAKE_PID_DIR: dir }), alive: () => alive().map((p) => p.pid) };
}

/**
 * Callbacks the way a Standard Webhooks receiver reads them. Delivery is at least once: an attempt cut short
 * by a killed agent (the receiver has the event, the agent never recorded its 2xx) is made again by the next
 * agent under the same `webhook-id`. `events` are the deliveries in the order received, each repeat of the
 * event received just before it (same `webhook-id`) moved to `repeats`; an event that comes again after a
 * later one stays in `events` twice, so comparing `events` with the history still catches it.
 */
export function distinctCallbacks(received: readonly ReceivedWebhook[]): {
  events: ReceivedWebhook[];
  repeats: { first: ReceivedWebhook; again: ReceivedWebhook }[];
} {
  const events: ReceivedWebhook[] = [];
  const repeats: { first: ReceivedWebhook; again: ReceivedWebhook }[] = [];
  for (const w of received) {
    const last = events.at(-1);
    if (last !== undefined && last.headers["webhook-id"] === w.headers["webhook-id"])
      repeats.push({ first: last, again: w });
    else events.push(w);
  }
  return { events, repeats };
}

/**
 * `workers` loops sending requests through Caddy back to back until stopped: half on a fresh connection
 * each, half on kept-alive ones.
 */
export function startLoad(port: number, host: string, workers = 4) {
  let running = true;
  const keepAlive = new http.Agent({ keepAlive: true });
  const results: { status: number; body: string; at: number }[] = [];
  const loops = Array.from({ length: workers }, async (_, i) => {
    while (running) {
      const r = await proxyRequest(port, host, "/", i % 2 === 0 ? false : keepAlive).catch((err: Error) => ({
        status: 0,
        body: err.message,
      }));
      results.push({ ...r, at: Date.now() });
    }
  });
  return {
    results,
    stop: async () => {
      running = false;
      await Promise.all(loops);
      keepAlive.destroy();
      return results;
    },
  };
}

/**
 * `update(id, version, source)`: requests an operator update through the API and resolves with its status
 * once it is final (`completed`, `failed` or `rolled_back`).
 */
export function updater(call: TestApp["call"], callbackUrl: string) {
  return async (id: string, version: string, artifact_source: string) => {
    const res = await call({
      method: "POST",
      url: "/v1/operator/update",
      payload: { callback_url: callbackUrl, update_process_id: id, version, artifact_source },
    });
    assert.equal(res.statusCode, 202, res.body);
    return waitFor(`update ${id}`, async () => {
      const s = (await call({ method: "GET", url: `/v1/operator/update/${id}` })).json();
      return ["completed", "failed", "rolled_back"].includes(s.state) ? s : undefined;
    });
  };
}
