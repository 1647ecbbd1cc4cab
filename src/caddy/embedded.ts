import { join } from "node:path";
import type { Logger } from "pino";
import { CaddyRoutes } from "../proxy/caddy-routes.js";
import type { CaddyAdminAddress } from "../proxy/settings.js";
import { canonicalJson } from "../util/canonical-json.js";
import { CHILD_ENV, childEnv, execChild, spawnChild } from "../util/child-env.js";
import { fs } from "../util/node-builtins.js";
import { processStartTime } from "../util/processes.js";
import { settledWithin, sleep } from "../util/timers.js";
import { hostPort } from "../util/urls.js";
import { CaddyAdmin } from "./admin.js";
import {
  describeHolders,
  listeningInodes,
  socketHolders,
  socketInodesOf,
  tcpAddresses,
  tryBind,
} from "./listen-addresses.js";

const { closeSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, statSync, writeFileSync } = fs;

export interface EmbeddedCaddyOptions {
  dataDir: string;
  binary: string;
  /** Name of the managed server under `apps.http.servers`. */
  server: string;
  /** The managed server's listen addresses (HOSTKEEPER_CADDY_LISTEN). */
  listen: readonly string[];
  /**
   * Delay before the first restart after an exit; it doubles per further exit, up to 64 times this, and
   * starts over once a Caddy has stayed up 64 times this.
   */
  restartBackoffMs: number;
  /** Time-out of one admin request while the agent sets Caddy up. */
  adminTimeoutMs: number;
  /** Caddy's own log is rolled at this size (MiB), keeping this many rolled files. */
  logRoll: { sizeMb: number; keep: number };
  log: Logger;
  /** How long a started Caddy has to answer on its admin socket. */
  startTimeoutMs?: number;
  /** How often an adopted Caddy's PID is looked at. */
  pollMs?: number;
}

/** What the agent knows of the Caddy it runs, for the status endpoint. */
export interface CaddyProcessStatus {
  /** PID of the running Caddy; null while it is down. */
  pid: number | null;
  /** `running`; `restarting` between an exit and the next Caddy answering; `stopped` once the agent stops. */
  state: "running" | "restarting" | "stopped";
  /** The running Caddy was found running when the agent started (watched by its PID), not started by it. */
  adopted: boolean;
  /** How many times the agent has started Caddy again after it exited, since the agent started. */
  restarts: number;
  lastExitAt: string | null;
  lastRestartAt: string | null;
}

/** A start-up problem of the embedded Caddy, said in one line for the person starting the agent. */
export class EmbeddedCaddyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EmbeddedCaddyError";
  }
}

interface Running {
  pid: number;
  /** Kernel start time, so that a PID reused by another process is not taken for Caddy. */
  procStart: string | undefined;
  startedAt: number;
}

/** Caddy's stderr file (what it writes before its log config is loaded, and a crash) is cut at this size. */
const STDERR_LIMIT_BYTES = 1024 * 1024;

const heldAdvice =
  "Caddy would fail to bind it, or, beside a server using SO_REUSEPORT, share its connections with that server without a word";

/**
 * The agent's own Caddy: admin API on a unix socket in the data dir, config autosaved there and resumed on
 * start, so routes made through the API survive restarts of Caddy. A Caddy already answering on the socket
 * is adopted. Caddy runs in its own session and outlives the agent, so restarting or upgrading the agent
 * never interrupts traffic.
 *
 * While the agent runs it supervises that Caddy: when it exits it is started again (`--resume`, so with its
 * routes) after a delay that doubles with each exit in a row. A Caddy the agent started is its child and
 * its exit is an event; an adopted one is not, and cannot be waited on, so its PID is polled.
 *
 * The managed server exists from the start, listening on HOSTKEEPER_CADDY_LISTEN, and no other process may
 * hold those addresses: that is checked before Caddy binds them (see `tryBind`), and for an adopted Caddy on
 * the owners of the listening sockets.
 */
export class EmbeddedCaddy {
  readonly address: CaddyAdminAddress;
  private readonly dir: string;
  private readonly socketPath: string;
  private readonly pidFile: string;
  private readonly admin: CaddyAdmin;
  /** Asks whether Caddy answers: a hung Caddy must not hold the start for a whole admin time-out. */
  private readonly probe: CaddyAdmin;
  private running: Running | undefined;
  private state: CaddyProcessStatus["state"] = "stopped";
  private adopted = false;
  private restarts = 0;
  /** Exits in a row, each without the Caddy before it staying up long enough: the backoff's exponent. */
  private exitsInARow = 0;
  private lastExitAt: string | null = null;
  private lastRestartAt: string | null = null;
  private timer: NodeJS.Timeout | undefined;
  private restarting: Promise<void> | undefined;
  private closed = false;
  private version: { pid: number; value: Promise<string | null> } | undefined;

  constructor(private readonly o: EmbeddedCaddyOptions) {
    this.dir = join(o.dataDir, "caddy");
    this.socketPath = join(this.dir, "admin.sock");
    this.pidFile = join(this.dir, "caddy.pid");
    this.address = { kind: "unix", socketPath: this.socketPath };
    this.admin = new CaddyAdmin(this.address, o.adminTimeoutMs);
    this.probe = new CaddyAdmin(this.address, 2_000);
  }

  /**
   * Adopts the running Caddy or starts one, makes sure the managed server exists on its listen addresses,
   * and starts supervising. Throws an EmbeddedCaddyError when Caddy cannot run as configured (a listen
   * address held by another process, no binary, no answer).
   */
  async start(): Promise<void> {
    if (existsSync(this.socketPath) && (await this.answers())) {
      this.adopt();
      await this.prepareServer();
      await this.prepareLogging();
      this.refuseForeignListeners();
    } else {
      await this.refuseHeldAddresses(this.addressesToCheck());
      const pid = await this.launch();
      this.o.log.info({ caddyPid: pid, socket: this.socketPath }, "started the embedded Caddy");
      try {
        await this.prepareServer();
        await this.prepareLogging();
        // A server that bound with SO_REUSEPORT between the check above and Caddy's own bind.
        this.refuseForeignListeners();
      } catch (err) {
        this.stopStarted(pid);
        throw err;
      }
    }
    this.state = "running";
  }

  /** Stops supervising (no restart from now on); Caddy keeps running. Waits for a restart under way. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    clearInterval(this.timer);
    if (this.restarting) await settledWithin(this.restarting, (this.o.startTimeoutMs ?? 15_000) + 5_000);
    this.state = "stopped";
  }

  status(): CaddyProcessStatus {
    return {
      pid: this.running?.pid ?? null,
      state: this.state,
      adopted: this.adopted,
      restarts: this.restarts,
      lastExitAt: this.lastExitAt,
      lastRestartAt: this.lastRestartAt,
    };
  }

  /**
   * `caddy version` of the running Caddy, run from its own executable (`/proc/<pid>/exe`: still the
   * running one when the binary has been replaced since); asked once per Caddy process.
   */
  caddyVersion(): Promise<string | null> {
    const pid = this.running?.pid;
    if (pid === undefined) return Promise.resolve(null);
    if (this.version?.pid !== pid) {
      const exe = existsSync(`/proc/${pid}/exe`) ? `/proc/${pid}/exe` : this.o.binary;
      this.version = {
        pid,
        value: new Promise((resolve) =>
          execChild(
            exe,
            ["version"],
            { timeout: 5_000, env: childEnv(process.env, CHILD_ENV.caddy) },
            (err, stdout) => resolve(err ? null : (stdout.trim().split(/\s+/)[0] ?? null)),
          ),
        ),
      };
    }
    return this.version.value;
  }

  /** Where Caddy's log goes: a file Caddy rolls itself (its own config, so it holds for an adopted Caddy too). */
  get logPath(): string {
    return join(this.dir, "caddy.log");
  }

  /** Caddy's stderr: only what it writes before its log config is loaded, and the words of a crash. */
  get stderrPath(): string {
    return join(this.dir, "caddy.stderr.log");
  }

  /** The `logging.logs.default` Caddy gets: a file writer rolled at a size, a bounded number kept (gzipped). */
  logConfig(): Record<string, unknown> {
    return {
      writer: {
        output: "file",
        filename: this.logPath,
        roll: true,
        roll_size_mb: this.o.logRoll.sizeMb,
        roll_keep: this.o.logRoll.keep,
      },
      // JSON with ISO 8601 times, as the agent's own log: one reader for both.
      encoder: { format: "json", time_format: "iso8601" },
    };
  }

  /**
   * Caddy's default log is the rolled file: set when the config Caddy runs (autosaved by an earlier
   * agent, or adopted) has another one. A config change only when it differs, as it reloads Caddy.
   */
  private async prepareLogging(): Promise<void> {
    try {
      const now = await this.admin.read("/config/logging");
      const current = now.status === 200 ? (JSON.parse(now.text) as Record<string, unknown> | null) : null;
      const logs = (current?.logs ?? {}) as Record<string, unknown>;
      if (canonicalJson(logs.default ?? null) === canonicalJson(this.logConfig())) return;
      const wanted = { ...current, logs: { ...logs, default: this.logConfig() } };
      await this.admin.write(current === null ? "PUT" : "PATCH", "/config/logging", wanted);
      this.o.log.info({ log: this.logPath, roll: this.o.logRoll }, "set the embedded Caddy's log");
    } catch (err) {
      throw new EmbeddedCaddyError(
        `the embedded Caddy refused its log configuration (${this.logPath}): ${(err as Error).message}`,
      );
    }
  }

  private async answers(): Promise<boolean> {
    try {
      return (await this.probe.raw("GET", "/config/admin")).status === 200;
    } catch {
      return false;
    }
  }

  private adopt(): void {
    this.adopted = true;
    const pid = Number(readFileSyncOr(this.pidFile, "").trim());
    const procStart = pid > 0 ? processStartTime(pid) : undefined;
    if (procStart === undefined) {
      this.o.log.warn(
        { socket: this.socketPath, pidFile: this.pidFile },
        "using the running embedded Caddy, but its PID file names no live process: it is not supervised",
      );
      return;
    }
    this.running = { pid, procStart, startedAt: Date.now() };
    this.o.log.info({ caddyPid: pid, socket: this.socketPath }, "using the running embedded Caddy");
    // Not a child of this agent: nothing to wait on, so the PID is polled (with its start time, as PIDs are reused).
    this.timer = setInterval(() => {
      if (processStartTime(pid) !== procStart) {
        clearInterval(this.timer);
        this.exited(pid, "is gone");
      }
    }, this.o.pollMs ?? 500);
    this.timer.unref();
  }

  /**
   * Starts Caddy and waits until it answers on its admin socket; returns its PID. Its exit, then or later,
   * is handled here: during the wait it fails the start, afterwards it is an exit to restart from.
   */
  private async launch(): Promise<number> {
    if (!existsSync(this.o.binary))
      throw new EmbeddedCaddyError(
        `no Caddy at ${this.o.binary}: run scripts/fetch-caddy.sh, or set HOSTKEEPER_CADDY_BINARY or HOSTKEEPER_CADDY_ADMIN`,
      );
    mkdirSync(join(this.dir, "config"), { recursive: true, mode: 0o700 });
    mkdirSync(join(this.dir, "data"), { recursive: true, mode: 0o700 });
    const bootstrap = join(this.dir, "bootstrap.json");
    writeFileSync(
      bootstrap,
      JSON.stringify({
        admin: { listen: `unix/${this.socketPath}|0600`, config: { persist: true } },
        logging: { logs: { default: this.logConfig() } },
      }),
      { mode: 0o600 },
    );
    const logPath = this.stderrPath;
    capFile(logPath, STDERR_LIMIT_BYTES);
    const logFd = openSync(logPath, "a", 0o600);
    let child: ReturnType<typeof spawnChild>;
    try {
      child = spawnChild(
        this.o.binary,
        ["run", "--resume", "--config", bootstrap, "--pidfile", this.pidFile],
        {
          detached: true,
          stdio: ["ignore", logFd, logFd],
          env: childEnv(process.env, CHILD_ENV.caddy, {
            XDG_CONFIG_HOME: join(this.dir, "config"),
            XDG_DATA_HOME: join(this.dir, "data"),
            HOME: this.dir,
          }),
        },
      );
    } finally {
      closeSync(logFd);
    }
    let exited: string | undefined;
    // Registered first: a spawn that fails emits "error", which would otherwise be thrown.
    child.once("error", (err) => {
      exited = `could not be started: ${err.message}`;
    });
    const pid = child.pid;
    if (pid === undefined) throw new EmbeddedCaddyError(`could not start ${this.o.binary}`);
    child.once("exit", (code, signal) => {
      exited = signal ? `was killed by ${signal}` : `exited with code ${code}`;
      if (this.running?.pid === pid) this.exited(pid, exited);
    });
    child.unref();
    const timeoutMs = this.o.startTimeoutMs ?? 15_000;
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (exited) throw new EmbeddedCaddyError(`the embedded Caddy ${exited}; see ${logPath}`);
      if (await this.answers()) {
        if (exited) throw new EmbeddedCaddyError(`the embedded Caddy ${exited}; see ${logPath}`);
        this.running = { pid, procStart: processStartTime(pid), startedAt: Date.now() };
        return pid;
      }
      await sleep(100);
    }
    this.stopStarted(pid);
    throw new EmbeddedCaddyError(
      `the embedded Caddy did not answer on ${this.socketPath} within ${timeoutMs} ms; see ${logPath}`,
    );
  }

  /** Stops a Caddy this call started and must not leave running. */
  private stopStarted(pid: number): void {
    if (this.running?.pid === pid) this.running = undefined;
    try {
      process.kill(pid, "SIGTERM");
    } catch {
      // already gone
    }
  }

  /**
   * The managed server exists, listening on HOSTKEEPER_CADDY_LISTEN: created (without routes) when Caddy's
   * config has none, its listen list set when an earlier configuration left another one.
   */
  private async prepareServer(): Promise<void> {
    const routes = new CaddyRoutes(this.admin, { server: this.o.server, listen: this.o.listen });
    try {
      if (await routes.ensureServer()) {
        this.o.log.info({ server: this.o.server, listen: this.o.listen }, "created the managed server");
        return;
      }
      const path = `/config/apps/http/servers/${this.o.server}/listen`;
      const now = await this.admin.read(path);
      const current = now.status === 200 ? (JSON.parse(now.text) as string[] | null) : null;
      if (JSON.stringify(current) === JSON.stringify(this.o.listen)) return;
      await this.admin.write(current === null ? "PUT" : "PATCH", path, this.o.listen);
      this.o.log.info(
        { server: this.o.server, from: current, to: this.o.listen },
        "changed the managed server's listen addresses",
      );
    } catch (err) {
      throw new EmbeddedCaddyError(
        `the embedded Caddy refused the managed server ${this.o.server} on ${this.o.listen.join(", ")} (HOSTKEEPER_CADDY_LISTEN): ${(err as Error).message}`,
      );
    }
  }

  /**
   * What Caddy will bind when it starts: HOSTKEEPER_CADDY_LISTEN, and the listen list of the managed server
   * in the autosaved config that `--resume` loads (until it is set to the former).
   */
  private addressesToCheck(): string[] {
    const autosave = join(this.dir, "config", "caddy", "autosave.json");
    let saved: unknown;
    try {
      const config = JSON.parse(readFileSyncOr(autosave, "null")) as {
        apps?: { http?: { servers?: Record<string, { listen?: unknown }> } };
      } | null;
      saved = config?.apps?.http?.servers?.[this.o.server]?.listen;
    } catch {
      saved = undefined;
    }
    const fromSave = Array.isArray(saved) ? saved.filter((s): s is string => typeof s === "string") : [];
    return [...new Set([...this.o.listen, ...fromSave])];
  }

  /** Before Caddy binds: every address must be free (a bind without SO_REUSEPORT succeeds). */
  private async refuseHeldAddresses(listen: readonly string[]): Promise<void> {
    const problems: string[] = [];
    for (const a of tcpAddresses(listen)) {
      const err = await tryBind(a);
      if (!err) continue;
      if (err.code === "EADDRINUSE")
        problems.push(`${hostPort(a)} is already in use by ${describeHolders(socketHolders(a))}`);
      else if (err.code === "EACCES")
        problems.push(
          `${hostPort(a)} cannot be bound: permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)`,
        );
      else problems.push(`${hostPort(a)} cannot be bound: ${err.code ?? err.message}`);
    }
    if (problems.length > 0)
      throw new EmbeddedCaddyError(
        `Caddy listen address (HOSTKEEPER_CADDY_LISTEN): ${problems.join("; ")}. ${heldAdvice}. Stop that process or choose another address.`,
      );
  }

  /**
   * With Caddy running on the addresses: no listening socket for them may belong to another process. This
   * is what finds a server sharing an address with an adopted Caddy through SO_REUSEPORT, which no bind
   * attempt can (Caddy holds the address itself). Linux only: elsewhere there is no /proc to read.
   */
  private refuseForeignListeners(): void {
    const caddy = this.running?.pid;
    if (caddy === undefined) return;
    const own = socketInodesOf(caddy);
    const problems: string[] = [];
    for (const a of tcpAddresses(this.o.listen)) {
      const foreign = [...listeningInodes(a)].filter((i) => !own.has(i));
      if (foreign.length === 0) continue;
      const { holders, unattributed } = socketHolders(a);
      const others = { holders: holders.filter((h) => h.pid !== caddy), unattributed };
      problems.push(`${hostPort(a)} is also held by ${describeHolders(others)}`);
    }
    if (problems.length > 0)
      throw new EmbeddedCaddyError(
        `Caddy listen address (HOSTKEEPER_CADDY_LISTEN): ${problems.join("; ")}, sharing it with the embedded Caddy (pid ${caddy}) through SO_REUSEPORT, so the kernel splits the connections between them. Stop that process or choose another address.`,
      );
  }

  /** The running Caddy has exited: a restart is due after the backoff delay. */
  private exited(pid: number, how: string): void {
    const was = this.running;
    if (was?.pid !== pid) return;
    this.running = undefined;
    this.lastExitAt = new Date().toISOString();
    if (this.closed) return;
    if (Date.now() - was.startedAt >= this.o.restartBackoffMs * 64) this.exitsInARow = 0;
    this.scheduleRestart({ caddyPid: pid }, `the embedded Caddy (pid ${pid}) ${how}`);
  }

  private scheduleRestart(fields: Record<string, unknown>, why: string): void {
    const base = this.o.restartBackoffMs;
    const delayMs = Math.min(base * 2 ** this.exitsInARow, base * 64);
    this.exitsInARow++;
    this.state = "restarting";
    this.o.log.warn(
      { ...fields, restartInMs: delayMs, restarts: this.restarts },
      `${why}; starting it again in ${delayMs} ms`,
    );
    this.timer = setTimeout(() => {
      this.restarting = this.restart().finally(() => {
        this.restarting = undefined;
      });
    }, delayMs);
    this.timer.unref();
  }

  private async restart(): Promise<void> {
    if (this.closed) return;
    this.restarts++;
    this.lastRestartAt = new Date().toISOString();
    this.adopted = false;
    let pid: number;
    try {
      await this.refuseHeldAddresses(this.o.listen);
      pid = await this.launch();
    } catch (err) {
      if (!this.closed) this.scheduleRestart({ err }, "starting the embedded Caddy again failed");
      return;
    }
    this.state = "running";
    this.o.log.warn({ caddyPid: pid, restarts: this.restarts }, "started the embedded Caddy again");
    // `--resume` brought its config back; this only repairs a config that lost the managed server. A
    // failure leaves Caddy running (another Caddy cannot fix it) and shows in /readyz.
    await this.prepareServer().catch((err: unknown) =>
      this.o.log.error({ err }, "the embedded Caddy runs again, but without its managed server"),
    );
    await this.prepareLogging().catch((err: unknown) =>
      this.o.log.error({ err }, "the embedded Caddy runs again, but without its rolled log"),
    );
  }
}

function readFileSyncOr(path: string, fallback: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return fallback;
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
