import type { Logger } from "pino";
import { fs } from "../../util/node-builtins.js";
import type { CaddyAdmin, CallOptions } from "../admin.js";
import { CaddyConfig } from "../config.js";
import type { ConfigField } from "../config-fields.js";
import { managedServerCreation } from "../server-creation.js";
import type { CaddyAdminAddress } from "../settings.js";
import { type EmbeddedCaddyFiles, embeddedCaddyFiles } from "./files.js";
import { caddyOfPidFile, caddyVersionOf, launchCaddy, type RunningCaddy, terminate } from "./launch.js";
import { refuseForeignListeners, refuseHeldAddresses } from "./listener-checks.js";
import { type CaddyLogRoll, caddyLogConfig, prepareLogging } from "./log-config.js";
import { addressesToBind, type ManagedServer, prepareServer } from "./managed-server.js";
import { caddyMemoryEnv, goMemLimit, goMemLimitOf } from "./memory-limit.js";
import { type CaddyProcessStatus, CaddySupervisor } from "./supervisor.js";

const { existsSync } = fs;

export interface EmbeddedCaddyOptions {
  dataDir: string;
  binary: string;
  /** Name of the managed server under `apps.http.servers`. */
  server: string;
  /** The managed server's listen addresses (HOSTKEEPER_CADDY_LISTEN). */
  listen: readonly string[];
  /** The fields the agent keeps in Caddy's config outside the routes (`agentCaddyFields`). */
  fields: readonly ConfigField[];
  /** See `CaddySupervisorOptions.restartBackoffMs`. */
  restartBackoffMs: number;
  /** The process's client of Caddy's admin API, on this Caddy's socket (`embeddedCaddyAddress`). */
  admin: CaddyAdmin;
  /** Caddy's own log is rolled at this size (MiB), keeping this many rolled files. */
  logRoll: CaddyLogRoll;
  /** Go's memory limit for Caddy in MiB (HOSTKEEPER_CADDY_MEMORY_LIMIT_MB); 0: none. */
  memoryLimitMb: number;
  log: Logger;
  /** How long a started Caddy has to answer on its admin socket. */
  startTimeoutMs?: number;
  /** How often an adopted Caddy's PID is looked at. */
  pollMs?: number;
}

/** Where the embedded Caddy of the agent whose data dir is `dataDir` has its admin API. */
export function embeddedCaddyAddress(dataDir: string): CaddyAdminAddress {
  return { kind: "unix", socketPath: embeddedCaddyFiles(dataDir).socket };
}

/** Asks whether Caddy answers: a hung Caddy must not hold the start for a whole admin time-out. */
const PROBE: CallOptions = { timeoutMs: 2_000, counted: false };

/**
 * The agent's own Caddy: admin API on a unix socket in the data dir, config autosaved there and resumed on
 * start, so routes made through the API survive restarts of Caddy. A Caddy already answering on the socket
 * is adopted. Caddy runs in its own session and outlives the agent, so restarting or upgrading the agent
 * never interrupts traffic. While the agent runs, `CaddySupervisor` (supervisor.ts) starts it again when it
 * exits.
 *
 * The managed server exists from the start, listening on HOSTKEEPER_CADDY_LISTEN, and no other process may
 * hold those addresses (listener-checks.ts).
 */
export class EmbeddedCaddy {
  readonly address: CaddyAdminAddress;
  private readonly files: EmbeddedCaddyFiles;
  private readonly server: ManagedServer;
  /** Caddy's config as the set-up reads and writes it: not counted in the metrics, which are the routes'. */
  private readonly caddyConfig: CaddyConfig;
  private readonly supervisor: CaddySupervisor;
  private readonly startTimeoutMs: number;
  private version: { pid: number; value: Promise<string | null> } | undefined;

  constructor(private readonly o: EmbeddedCaddyOptions) {
    this.files = embeddedCaddyFiles(o.dataDir);
    this.server = { name: o.server, listen: o.listen, fields: o.fields };
    this.address = o.admin.address;
    if (this.address.kind !== "unix" || this.address.socketPath !== this.files.socket)
      throw new Error(`the embedded Caddy's admin client must be on ${this.files.socket}`);
    this.caddyConfig = new CaddyConfig(o.admin, { counted: false });
    this.startTimeoutMs = o.startTimeoutMs ?? 15_000;
    this.supervisor = new CaddySupervisor({
      restartBackoffMs: o.restartBackoffMs,
      pollMs: o.pollMs ?? 500,
      closeTimeoutMs: this.startTimeoutMs + 5_000,
      log: o.log,
      relaunch: async () => {
        await refuseHeldAddresses(o.listen);
        return this.launch();
      },
      repair: () => this.repair(),
    });
  }

  /**
   * Adopts the running Caddy or starts one, makes sure the managed server exists on its listen addresses,
   * and starts supervising. Throws an EmbeddedCaddyError when Caddy cannot run as configured (a listen
   * address held by another process, no binary, no answer).
   */
  async start(): Promise<void> {
    if (existsSync(this.files.socket) && (await this.answers())) {
      this.adopt();
      await this.prepare();
    } else {
      await refuseHeldAddresses(addressesToBind(this.files.autosave, this.server));
      const caddy = await this.launch();
      this.supervisor.launched(caddy);
      this.o.log.info({ caddyPid: caddy.pid, socket: this.files.socket }, "started the embedded Caddy");
      try {
        // The listener check here also finds a server that bound with SO_REUSEPORT between the check
        // above and Caddy's own bind.
        await this.prepare();
      } catch (err) {
        // Not left running: it is this start's own Caddy, and its exit is not one to restart from.
        this.supervisor.forget(caddy.pid);
        terminate(caddy.pid);
        throw err;
      }
    }
    this.supervisor.markRunning();
  }

  /** Stops supervising (no restart from now on); Caddy keeps running. Waits for a restart under way. */
  close(): Promise<void> {
    return this.supervisor.close();
  }

  status(): CaddyProcessStatus {
    return this.supervisor.status();
  }

  /** `caddy version` of the running Caddy (see `caddyVersionOf`); asked once per Caddy process. */
  caddyVersion(): Promise<string | null> {
    const pid = this.supervisor.pid;
    if (pid === undefined) return Promise.resolve(null);
    if (this.version?.pid !== pid) this.version = { pid, value: caddyVersionOf(pid, this.o.binary) };
    return this.version.value;
  }

  private async answers(): Promise<boolean> {
    try {
      return (await this.o.admin.raw("GET", "/config/admin", PROBE)).status === 200;
    } catch {
      return false;
    }
  }

  private adopt(): void {
    const caddy = caddyOfPidFile(this.files.pidFile);
    this.supervisor.adopt(caddy);
    if (caddy) {
      this.o.log.info({ caddyPid: caddy.pid, socket: this.files.socket }, "using the running embedded Caddy");
      const [running, wanted] = [goMemLimitOf(caddy.pid), goMemLimit(this.o.memoryLimitMb)];
      if (running !== wanted)
        this.o.log.warn(
          { caddyPid: caddy.pid, GOMEMLIMIT: running ?? null, wanted },
          "the running embedded Caddy has another memory limit than HOSTKEEPER_CADDY_MEMORY_LIMIT_MB; it takes the setting at its next start",
        );
    } else
      this.o.log.warn(
        { socket: this.files.socket, pidFile: this.files.pidFile },
        "using the running embedded Caddy, but its PID file names no live process: it is not supervised",
      );
  }

  private launch(): Promise<RunningCaddy> {
    return launchCaddy({
      binary: this.o.binary,
      files: this.files,
      logConfig: caddyLogConfig(this.files.log, this.o.logRoll),
      env: caddyMemoryEnv(this.o.memoryLimitMb),
      apps: this.bootstrapApps(),
      timeoutMs: this.startTimeoutMs,
      answers: () => this.answers(),
      onExit: (pid, how) => this.supervisor.exited(pid, how),
    });
  }

  /** The apps of a Caddy started without an autosaved config: the managed server and the agent's fields. */
  private bootstrapApps(): Record<string, unknown> {
    const { value } = managedServerCreation(null, { ...this.server, server: this.server.name }, []);
    return (value as { apps: Record<string, unknown> }).apps;
  }

  /** The running Caddy's config as the agent needs it, and its listen addresses its own. */
  private async prepare(): Promise<void> {
    await prepareServer(this.caddyConfig, this.server, this.o.log);
    await prepareLogging(this.caddyConfig, this.files.log, this.o.logRoll, this.o.log);
    refuseForeignListeners(this.supervisor.pid, this.o.listen);
  }

  /** After a restart `--resume` brought the config back: this only repairs one that lost a part. */
  private async repair(): Promise<void> {
    await prepareServer(this.caddyConfig, this.server, this.o.log).catch((err: unknown) =>
      this.o.log.error({ err }, "the embedded Caddy runs again, but without its managed server"),
    );
    await prepareLogging(this.caddyConfig, this.files.log, this.o.logRoll, this.o.log).catch((err: unknown) =>
      this.o.log.error({ err }, "the embedded Caddy runs again, but without its rolled log"),
    );
  }
}
