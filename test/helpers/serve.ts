import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../../src/paths.js";
import { freePort, httpRequest } from "../../support/loopback.js";

type After = { after: (fn: () => unknown) => void };

export interface ServedAgent {
  child: ChildProcess;
  port: number;
  log: () => string;
  /** Resolves once the agent's output holds `text`; rejects if its output ends first, or after `ms`. */
  waitForLog: (text: string, ms: number) => Promise<void>;
  exited: Promise<number | null>;
}

export const request = (
  port: number,
  method: string,
  path: string,
  token?: string,
  body?: unknown,
  headers: Record<string, string> = {},
) =>
  httpRequest(port, method, path, {
    body,
    headers: { ...headers, ...(token ? { authorization: `Bearer ${token}` } : {}) },
  });

export const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Runs `hostkeeper serve` as a child with `env` (plus PATH, a loopback listen address, log level info). */
export function spawnAgent(env: Record<string, string>, port: number): ServedAgent {
  const child = spawn(process.execPath, [join(projectRoot(), "dist/src/cli/main.js"), "serve"], {
    env: {
      PATH: process.env.PATH,
      HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
      HOSTKEEPER_LOG_LEVEL: "info",
      // A test Caddy's server (`startCaddy`) serves plain HTTP; the agent keeps it so unless a test asks.
      ...(env.HOSTKEEPER_CADDY_ADMIN ? { HOSTKEEPER_TLS_ISSUER: "off" } : {}),
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  const onOutput = new Set<() => void>();
  const append = (d: Buffer) => {
    log += d.toString();
    for (const check of onOutput) check();
  };
  child.stdout?.on("data", append);
  child.stderr?.on("data", append);
  // A line the agent wrote may still be on its way through the pipe when the agent answers a request.
  const waitForLog = (text: string, ms: number) =>
    new Promise<void>((resolve, reject) => {
      const finish = (err?: Error) => {
        clearTimeout(timer);
        onOutput.delete(check);
        child.off("close", closed);
        if (err) reject(err);
        else resolve();
      };
      const check = () => {
        if (log.includes(text)) finish();
      };
      const closed = () =>
        finish(new Error(`the agent's output ended without ${JSON.stringify(text)}:\n${log}`));
      const timer = setTimeout(
        () => finish(new Error(`no ${JSON.stringify(text)} in the agent's output within ${ms} ms:\n${log}`)),
        ms,
      );
      onOutput.add(check);
      child.once("close", closed);
      check();
    });
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  return { child, port, log: () => log, waitForLog, exited };
}

/**
 * Starts the agent (`hostkeeper serve`) and waits until it answers /healthz. When the test ends it is killed
 * by its PID if it still runs, and then every Caddy it started for its data dir (it cannot start another by
 * then).
 */
export async function startAgent(t: After, env: Record<string, string>): Promise<ServedAgent> {
  const agent = spawnAgent(env, await freePort());
  const { child, port } = agent;
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      process.kill(child.pid as number, "SIGKILL");
      await agent.exited;
    }
    if (env.HOSTKEEPER_DATA_DIR) await killEmbeddedCaddys(env.HOSTKEEPER_DATA_DIR);
  });
  const end = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`agent exited: ${agent.log()}`);
    try {
      if ((await request(port, "GET", "/healthz")).status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > end) throw new Error(`agent did not start: ${agent.log()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return agent;
}

/** Stops the agent with SIGTERM and resolves with its exit code. */
export async function stopAgent(agent: ServedAgent): Promise<number | null> {
  if (agent.child.exitCode === null && agent.child.signalCode === null)
    process.kill(agent.child.pid as number, "SIGTERM");
  return agent.exited;
}

/** PID in the embedded Caddy's PID file of `dataDir`; undefined when there is none. */
export function caddyPid(dataDir: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(dataDir, "caddy", "caddy.pid"), "utf8").trim());
    return pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Every live Caddy the agent started for `dataDir`: the processes whose command line names the PID file in
 * that (unique, temporary) directory. More than the PID file alone, which names only the last one.
 */
export function embeddedCaddyPids(dataDir: string): number[] {
  const pidFile = join(dataDir, "caddy", "caddy.pid");
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const args = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      if (args.includes(pidFile)) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** Kills (by PID) every Caddy the agent started for `dataDir`; for the end of a test, after the agent stopped. */
export async function killEmbeddedCaddys(dataDir: string): Promise<void> {
  for (const pid of embeddedCaddyPids(dataDir)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
    const end = Date.now() + 5_000;
    while (alive(pid) && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  }
}
