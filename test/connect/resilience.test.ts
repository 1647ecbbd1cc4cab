/**
 * The control plane killed (SIGKILL) while an asynchronous apply runs in a sandboxed apt (issue 37): the
 * agent dials again, the request sent again with its id is answered from the first run and the apply runs
 * once, and every event of the apply reaches the control plane over the connection. The control plane is
 * the runnable example of docs/connect.md (docs/examples/control-plane.ts), in a child process.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { before, test } from "node:test";
import { projectRoot } from "../../src/paths.js";
import { freePort } from "../../support/loopback.js";
import { buildTestApp } from "../helpers/app.js";
import {
  type AptRepo,
  aptAgentEnv,
  buildAptRepo,
  createAptSandbox,
  type DebSpec,
  debianArch,
  waitingPostinst,
} from "../helpers/apt-sandbox.js";
import { serveDirectory } from "../helpers/http.js";
import { waitFor } from "../helpers/wait.js";

const DEBS: DebSpec[] = [
  ...["labreg", "labslow"].map((name): DebSpec => ({ name, version: "1.0", suites: ["bookworm"] })),
  { name: "labreg", version: "1.1", suites: ["bookworm-updates"] },
  { name: "labslow", version: "1.1", suites: ["bookworm-updates"], postinst: waitingPostinst("labslow") },
];

let repo: AptRepo;
before(async () => {
  repo = await buildAptRepo({ after: () => {} }, DEBS, debianArch());
});
test.after(() => rmSync(repo.dir, { recursive: true, force: true }));

interface ControlPlaneProcess {
  child: ChildProcess;
  started: { public_key: string; enroll_token: string; listening: string };
  api: (path: string, body?: unknown) => Promise<{ status: number; json: unknown }>;
}

/** The example control plane in `dir` on `port`, its platform API on `apiPort`; killed by PID at the end. */
async function startExample(
  t: { after: (fn: () => unknown) => void },
  dir: string,
  port: number,
  apiPort: number,
): Promise<ControlPlaneProcess> {
  const child = spawn(
    join(projectRoot(), "scripts/node"),
    [join(projectRoot(), "dist/docs/examples/control-plane.js")],
    {
      env: {
        ...process.env,
        CP_DIR: dir,
        CP_LISTEN: `127.0.0.1:${port}`,
        CP_API_LISTEN: `127.0.0.1:${apiPort}`,
      },
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  });
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  const started = await new Promise<ControlPlaneProcess["started"]>((resolve, reject) => {
    lines.once("line", (l) => resolve(JSON.parse(l)));
    child.once("exit", (code) => reject(new Error(`the control plane exited with ${code}`)));
  });
  const api = async (path: string, body?: unknown) => {
    const res = await fetch(`http://127.0.0.1:${apiPort}${path}`, {
      method: body === undefined ? "GET" : "POST",
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, json: await res.json() };
  };
  return { child, started, api };
}

test("the control plane killed during an async apply: the agent dials again, the apply runs once, every event arrives", async (t) => {
  const mirror = await serveDirectory(t, repo.dir);
  const sandbox = await createAptSandbox(t, repo, {
    install: ["labreg=1.0", "labslow=1.0"],
    sourcesList: repo.sourcesList.replaceAll(`file:${repo.dir}`, mirror.url),
  });
  const dir = mkdtempSync(join(tmpdir(), "hk-cp-example-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const [port, apiPort] = [await freePort(), await freePort()];
  let cp = await startExample(t, dir, port, apiPort);
  const app = await buildTestApp(t, {
    ...aptAgentEnv(sandbox),
    // No reboot is asked for; were one, it would do nothing.
    HOSTKEEPER_REBOOT_COMMAND: "true",
    HOSTKEEPER_WEBHOOK_RETRY_SCHEDULE: "1,2,4,8,16,32",
    HOSTKEEPER_CONNECT_URL: cp.started.listening,
    HOSTKEEPER_CONNECT_KEYS: cp.started.public_key,
    HOSTKEEPER_ENROLL_TOKEN: cp.started.enroll_token,
    HOSTKEEPER_CONNECT_HEARTBEAT_S: "1",
  });
  const fingerprint = (await app.call({ method: "GET", url: "/v1/status" })).json().connect.fingerprint;
  const connected = () =>
    waitFor("the agent at the control plane", async () => {
      const agents = (await cp.api("/agents")).json as string[];
      return agents.includes(fingerprint) ? true : undefined;
    });
  await connected();
  const apply = {
    id: "apply-request-1",
    method: "POST",
    path: "/v1/system/apply-updates",
    headers: { prefer: "respond-async" },
    body: { update_type: "full", callback_url: "hostkeeper:connection" },
  };
  const first = await cp.api(`/agents/${encodeURIComponent(fingerprint)}/request`, apply);
  assert.equal(first.status, 200, JSON.stringify(first.json));
  const answer = first.json as { status: number; body: string };
  assert.equal(answer.status, 202, answer.body);
  const applyId = JSON.parse(answer.body).id as number;
  // Held in labslow's postinst: the apply is installing when the control plane dies.
  await waitFor("labslow's postinst", () => {
    try {
      return readFileSync(join(sandbox.root, "labslow-postinst.pid"), "utf8") ? true : undefined;
    } catch {
      return undefined;
    }
  });
  cp.child.kill("SIGKILL");
  await new Promise((resolve) => cp.child.once("exit", resolve));
  await waitFor("the agent to notice", async () => {
    const c = (await app.call({ method: "GET", url: "/v1/status" })).json().connect.connection;
    return c.state !== "connected" ? c : undefined;
  });

  cp = await startExample(t, dir, port, apiPort);
  await connected();
  // The same request id again: the first run's answer, nothing run again.
  const again = await cp.api(`/agents/${encodeURIComponent(fingerprint)}/request`, apply);
  assert.deepEqual(again.json, first.json);
  writeFileSync(join(sandbox.root, "release-labslow"), "");
  const done = await waitFor(
    "the apply to end",
    async () => {
      const s = (await app.call({ method: "GET", url: `/v1/system/applies/${applyId}` })).json();
      return ["completed", "failed"].includes(s.state) ? s : undefined;
    },
    60_000,
  );
  assert.equal(done.state, "completed", JSON.stringify(done.error));
  const history = (await app.call({ method: "GET", url: "/v1/system/apply-history" })).json();
  assert.equal(history.applies.length, 1, "one apply");
  const dpkgLog = readFileSync(join(sandbox.root, "var/log/dpkg.log"), "utf8");
  assert.equal(dpkgLog.match(/ upgrade labslow:/g)?.length, 1, "labslow upgraded once");

  // Every event of the apply, each state once, delivered over the connection (by its id, once each).
  const states = await waitFor(
    "every event at the control plane",
    async () => {
      const events = (await cp.api("/events")).json as {
        id: string;
        type: string;
        data: { id: number; state: string };
      }[];
      const ours = events.filter((e) => e.type === "system_update" && e.data.id === applyId);
      const byId = new Map(ours.map((e) => [e.id, e.data.state]));
      const states = [...byId.values()];
      return states.includes("completed") ? states : undefined;
    },
    60_000,
  );
  assert.deepEqual(states, ["queued", "downloading", "installing", "completed"]);
  // Each recorded delivered once its acknowledgement came.
  await waitFor("the outbox to hold nothing pending", async () => {
    const pending = (await app.call({ method: "GET", url: "/v1/events?state=pending" })).json();
    return pending.events.length === 0 ? true : undefined;
  });
});
