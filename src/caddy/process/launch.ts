import { CHILD_ENV, childEnv, execChild, spawnChild } from "../../util/child-env.js";
import { fs } from "../../util/node-builtins.js";
import { processStartTime } from "../../util/processes.js";
import { sleep } from "../../util/timers.js";
import { EmbeddedCaddyError } from "./errors.js";
import type { EmbeddedCaddyFiles } from "./files.js";

const { closeSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, statSync, writeFileSync } = fs;

/** A Caddy process the agent runs. */
export interface RunningCaddy {
  pid: number;
  /** Kernel start time, so that a PID reused by another process is not taken for Caddy. */
  procStart: string | undefined;
  startedAt: number;
}

export interface LaunchOptions {
  binary: string;
  files: EmbeddedCaddyFiles;
  /** Caddy's `logging.logs.default` from its first start on. */
  logConfig: Record<string, unknown>;
  /** Environment variables Caddy gets besides the allowed ones of the agent's (its Go memory limit). */
  env: Record<string, string>;
  /**
   * Caddy's `apps` from its first start on: the managed server and the fields the agent keeps, above all
   * the local CA's `install_trust: false`, in force before anything can issue.
   */
  apps: Record<string, unknown>;
  /** How long the started Caddy has to answer on its admin socket. */
  timeoutMs: number;
  /** Whether a Caddy answers on the admin socket. */
  answers: () => Promise<boolean>;
  /** Every exit of the started Caddy, during the wait for its answer or at any time after. */
  onExit: (pid: number, how: string) => void;
}

/** Caddy's stderr file (what it writes before its log config is loaded, and a crash) is cut at this size. */
const STDERR_LIMIT_BYTES = 1024 * 1024;

/**
 * Starts Caddy in its own session (it outlives the agent) with its admin API on the socket, resuming its
 * autosaved config, and waits until it answers there. An exit during the wait fails the start; every exit,
 * then or later, also goes to `onExit`.
 */
export async function launchCaddy(o: LaunchOptions): Promise<RunningCaddy> {
  if (!existsSync(o.binary))
    throw new EmbeddedCaddyError(
      `no Caddy at ${o.binary}: run scripts/fetch-caddy.sh, or set HOSTKEEPER_CADDY_BINARY or HOSTKEEPER_CADDY_ADMIN`,
    );
  writeBootstrap(o.files, o.logConfig, o.apps);
  const child = spawnCaddy(o.binary, o.files, o.env);
  let exited: string | undefined;
  // Registered first: a spawn that fails emits "error", which would otherwise be thrown.
  child.once("error", (err) => {
    exited = `could not be started: ${err.message}`;
  });
  const pid = child.pid;
  if (pid === undefined) throw new EmbeddedCaddyError(`could not start ${o.binary}`);
  child.once("exit", (code, signal) => {
    exited = signal ? `was killed by ${signal}` : `exited with code ${code}`;
    o.onExit(pid, exited);
  });
  child.unref();
  const failed = () => new EmbeddedCaddyError(`the embedded Caddy ${exited}; see ${o.files.stderr}`);
  const deadline = Date.now() + o.timeoutMs;
  while (Date.now() < deadline) {
    if (exited) throw failed();
    if (await o.answers()) {
      // It may have exited while it was asked: the exit outweighs the answer.
      if (exited) throw failed();
      return { pid, procStart: processStartTime(pid), startedAt: Date.now() };
    }
    await sleep(100);
  }
  terminate(pid);
  throw new EmbeddedCaddyError(
    `the embedded Caddy did not answer on ${o.files.socket} within ${o.timeoutMs} ms; see ${o.files.stderr}`,
  );
}

/** The config Caddy starts from when it has no autosaved one: its admin socket, persisting, its log, its apps. */
function writeBootstrap(
  files: EmbeddedCaddyFiles,
  logConfig: Record<string, unknown>,
  apps: Record<string, unknown>,
): void {
  mkdirSync(files.configHome, { recursive: true, mode: 0o700 });
  mkdirSync(files.dataHome, { recursive: true, mode: 0o700 });
  writeFileSync(
    files.bootstrap,
    JSON.stringify({
      admin: { listen: `unix/${files.socket}|0600`, config: { persist: true } },
      logging: { logs: { default: logConfig } },
      apps,
    }),
    { mode: 0o600 },
  );
}

function spawnCaddy(binary: string, files: EmbeddedCaddyFiles, env: Record<string, string>) {
  capFile(files.stderr, STDERR_LIMIT_BYTES);
  const stderrFd = openSync(files.stderr, "a", 0o600);
  try {
    return spawnChild(binary, ["run", "--resume", "--config", files.bootstrap, "--pidfile", files.pidFile], {
      detached: true,
      stdio: ["ignore", stderrFd, stderrFd],
      env: childEnv(process.env, CHILD_ENV.caddy, {
        ...env,
        XDG_CONFIG_HOME: files.configHome,
        XDG_DATA_HOME: files.dataHome,
        HOME: files.dir,
      }),
    });
  } finally {
    closeSync(stderrFd);
  }
}

/** Moves `path` to `<path>.1` (replacing an older one) once it holds `limit` bytes or more. */
function capFile(path: string, limit: number): void {
  try {
    if (statSync(path).size >= limit) renameSync(path, `${path}.1`);
  } catch {
    // no file yet
  }
}

/** The Caddy its PID file names, when that process is alive; undefined when there is none to watch. */
export function caddyOfPidFile(pidFile: string): RunningCaddy | undefined {
  let pid: number;
  try {
    pid = Number(readFileSync(pidFile, "utf8").trim());
  } catch {
    return undefined;
  }
  const procStart = pid > 0 ? processStartTime(pid) : undefined;
  return procStart === undefined ? undefined : { pid, procStart, startedAt: Date.now() };
}

/** Asks a Caddy to stop; one already gone is not an error. */
export function terminate(pid: number): void {
  try {
    process.kill(pid, "SIGTERM");
  } catch {
    // already gone
  }
}

/**
 * `caddy version` of the Caddy `pid`, run from its own executable (`/proc/<pid>/exe`: still the running one
 * when the binary has been replaced since); null when it cannot say.
 */
export function caddyVersionOf(pid: number, binary: string): Promise<string | null> {
  const exe = existsSync(`/proc/${pid}/exe`) ? `/proc/${pid}/exe` : binary;
  return new Promise((resolve) =>
    execChild(
      exe,
      ["version"],
      { timeout: 5_000, env: childEnv(process.env, CHILD_ENV.caddy) },
      (err, stdout) => resolve(err ? null : (stdout.trim().split(/\s+/)[0] ?? null)),
    ),
  );
}
