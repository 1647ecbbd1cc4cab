import { join } from "node:path";
import type { Logger } from "pino";
import { CHILD_ENV, type ChildEnv, childEnv, spawnChild } from "../util/child-env.js";
import { fs, http } from "../util/node-builtins.js";
import { processStartTime, signalGroup } from "../util/processes.js";
import { sleep } from "../util/timers.js";
import { UpdateFailure } from "./failure.js";
import type { ProcessRecord, Slot } from "./store.js";

const { accessSync, closeSync, constants, mkdirSync, openSync } = fs;

export function isRunning(p: { pid: number | null; proc_start: string | null }): boolean {
  return p.pid !== null && p.proc_start !== null && processStartTime(p.pid) === p.proc_start;
}

/** One GET of the health path; true on 2xx within `timeoutMs`. */
export function checkHealth(port: number, path: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.get({ host: "127.0.0.1", port, path, agent: false, timeout: timeoutMs }, (res) => {
      res.resume();
      resolve((res.statusCode ?? 0) >= 200 && (res.statusCode ?? 0) < 300);
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(false));
  });
}

export interface InstancesOptions {
  /** `<data dir>/operator`: one folder per slot holding the executable and its output log. */
  root: string;
  artifactName: string;
  extraEnv: Record<string, string>;
  stopTimeoutMs: number;
  log: Logger;
  /** The agent's environment, from which only a few neutral variables pass to instances. */
  env: NodeJS.ProcessEnv;
}

/**
 * Starts and stops operator instances. Each runs detached in its own session and process group (PGID = its
 * PID), so it outlives the agent and a stop reaches everything it started.
 */
export class Instances {
  constructor(private readonly o: InstancesOptions) {}

  slotDir(slot: Slot): string {
    return join(this.o.root, slot);
  }

  executable(slot: Slot): string {
    return join(this.slotDir(slot), this.o.artifactName);
  }

  /** Spawns the slot's executable; synchronous, so the caller records the PID before anything else runs. */
  start(slot: Slot, version: string, port: number): ProcessRecord {
    const file = this.executable(slot);
    try {
      accessSync(file, constants.X_OK);
    } catch (err) {
      throw new UpdateFailure("start_failed", `${file} is not executable: ${(err as Error).message}`);
    }
    const env = childEnv(this.o.env, CHILD_ENV.operator, {
      ...this.o.extraEnv,
      PORT: String(port),
      OPERATOR_SLOT: slot,
      OPERATOR_VERSION: version,
    });
    const child = spawnDetached(file, this.slotDir(slot), env);
    child.once("error", (err) => this.o.log.error({ err, slot }, "operator instance could not be started"));
    child.unref();
    if (child.pid === undefined) throw new UpdateFailure("start_failed", `${file} could not be started`);
    const procStart = processStartTime(child.pid) ?? "";
    this.o.log.info({ slot, version, port, pid: child.pid }, "started an operator instance");
    return { pid: child.pid, procStart, startedAt: new Date().toISOString(), port };
  }

  /** SIGTERM to the instance's process group, SIGKILL after the stop time-out; resolves once it is gone. */
  async stop(p: { pid: number | null; proc_start: string | null }, slot: Slot): Promise<void> {
    if (p.pid === null || !isRunning(p)) return;
    const pid = p.pid;
    this.o.log.info({ slot, pid }, "stopping an operator instance");
    signalGroup(pid, "SIGTERM");
    if (await waitGone(p, this.o.stopTimeoutMs)) return;
    this.o.log.warn({ slot, pid }, "operator instance ignored SIGTERM; killing its process group");
    if (isRunning(p)) signalGroup(pid, "SIGKILL");
    if (!(await waitGone(p, 5000))) throw new Error(`operator instance ${pid} survived SIGKILL`);
  }
}

/** Starts `file` in its own session in `dir`, its output appended to `dir/output.log`. */
function spawnDetached(file: string, dir: string, env: ChildEnv): ReturnType<typeof spawnChild> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const out = openSync(join(dir, "output.log"), "a", 0o600);
  try {
    return spawnChild(file, [], { cwd: dir, detached: true, stdio: ["ignore", out, out], env });
  } finally {
    // The child holds its own copy of the descriptor.
    closeSync(out);
  }
}

async function waitGone(p: { pid: number | null; proc_start: string | null }, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (isRunning(p)) {
    if (Date.now() >= end) return false;
    await sleep(25);
  }
  return true;
}
