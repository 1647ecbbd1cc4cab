import type { AgentUpdateService } from "../agent-update/service.js";
import { type CaddyAdmin, CaddyApiError, type CallOptions } from "../caddy/admin.js";
import { CaddyConfig } from "../caddy/config.js";
import { PerLoad } from "../caddy/last-load.js";
import { accepts, type TcpAddress, tcpAddresses } from "../caddy/process/listen-addresses.js";
import type { CaddyProcessStatus } from "../caddy/process/supervisor.js";
import type { ConnectStatus } from "../connect/client.js";
import type { AgentIdentity } from "../connect/identity.js";
import type { Outbox } from "../events/outbox.js";
import type { OperatorService } from "../operator/service.js";
import { packageVersion } from "../paths.js";
import type { Db } from "../store/db.js";
import type { SystemService } from "../system/service.js";
import { hostPort } from "../util/urls.js";
import type { AgentStatus, Check, Readiness } from "./schemas.js";

/** The embedded Caddy as the health area sees it. */
export interface SupervisedCaddy {
  status(): CaddyProcessStatus;
  caddyVersion(): Promise<string | null>;
}

export interface HealthServiceOptions {
  db: Db;
  /** The process's client of Caddy's admin API. */
  caddyAdmin: CaddyAdmin;
  /** Name of the managed server under `apps.http.servers`. */
  server: string;
  /** The agent's own Caddy; undefined with HOSTKEEPER_CADDY_ADMIN. */
  embedded: SupervisedCaddy | undefined;
  system: SystemService;
  operator: OperatorService;
  agentUpdate: Pick<AgentUpdateService, "newest">;
  outbox: Outbox;
  /** The agent's public key and its fingerprint. */
  identity: AgentIdentity;
  /** The connection to the control plane, when there is one. */
  connection?: { status(): ConnectStatus } | undefined;
}

/** Each readiness probe waits this long at most for Caddy, and for each listener. */
const PROBE_TIMEOUT_MS = 1_000;
/**
 * How long after its last answer Caddy's admin API may not answer while readiness follows its listeners:
 * longer than a config load at the largest hosts (seconds at 20,000 routes on a busy machine).
 */
const RELOAD_GRACE_MS = 30_000;
/**
 * The probe's reads, and the status's reads of the routes for their count: short time-outs, and not
 * counted in the metrics (which count the requests made for the routes).
 */
const PROBE: CallOptions = { timeoutMs: PROBE_TIMEOUT_MS, counted: false };
const STATUS_READ: CallOptions = { timeoutMs: 5_000, counted: false };

const ok = (detail: string): Check => ({ status: "ok", detail });
const failing = (detail: string): Check => ({ status: "failing", detail });

/**
 * Liveness, readiness and status. Readiness is cheap and bounded: one query of the database, one small read
 * of Caddy's admin API (tried again, a bounded number of times, after a connection error: see
 * `CaddyAdmin.read`; past that, Caddy's listeners decide, `checkCaddy`) and a TCP connect per listen address,
 * each with a short time-out, and requests that arrive while a probe is under way share its answer.
 */
export class HealthService {
  private readonly probeConfig: CaddyConfig;
  private readonly statusConfig: CaddyConfig;
  /** How many routes Caddy holds, counted once per config it loads. */
  private readonly routesCounted: PerLoad<number>;
  private readonly countQuery;
  private probe: Promise<Readiness> | undefined;
  /** The managed server's listen list as last read, and when (ms since the epoch). */
  private lastListen: { at: number; listen: string[] | undefined } | undefined;
  private readonly agentVersion = packageVersion();
  /** When the agent's process started. */
  private readonly startedAt = Date.now() - process.uptime() * 1000;

  constructor(private readonly o: HealthServiceOptions) {
    this.probeConfig = new CaddyConfig(o.caddyAdmin, PROBE);
    this.statusConfig = new CaddyConfig(o.caddyAdmin, STATUS_READ);
    this.routesCounted = new PerLoad(o.caddyAdmin, STATUS_READ);
    // A read of the database file itself (its first page), not only of the connection.
    this.countQuery = o.db.prepare("SELECT count(*) AS n FROM schema_migrations");
  }

  readiness(): Promise<Readiness> {
    this.probe ??= this.checkReadiness().finally(() => {
      this.probe = undefined;
    });
    return this.probe;
  }

  async status(): Promise<AgentStatus> {
    const [readiness, routeCount, caddyVersion, managerVersion] = await Promise.all([
      this.readiness(),
      this.routeCount(),
      this.o.embedded?.caddyVersion() ?? Promise.resolve(null),
      this.o.system.packageManagerVersion(),
    ]);
    const counts = this.o.outbox.countByState();
    const check = this.o.system.lastCheck();
    const embedded = this.o.embedded?.status();
    const reachable = readiness.checks.caddy_admin.status === "ok";
    const state =
      embedded?.state === "restarting" || embedded?.state === "stopped"
        ? embedded.state
        : reachable
          ? "running"
          : "unreachable";
    return {
      versions: {
        agent: this.agentVersion,
        node: process.version,
        caddy: caddyVersion,
        package_manager: { name: this.o.system.packageManager, version: managerVersion ?? null },
      },
      started_at: new Date(this.startedAt).toISOString(),
      uptime_seconds: Math.floor((Date.now() - this.startedAt) / 1000),
      caddy: {
        mode: embedded ? "embedded" : "external",
        state,
        pid: embedded?.pid ?? null,
        adopted: embedded?.adopted ?? false,
        restarts: embedded?.restarts ?? 0,
        last_exit_at: embedded?.lastExitAt ?? null,
        last_restart_at: embedded?.lastRestartAt ?? null,
      },
      routes: { count: routeCount },
      outbox: { pending: counts.pending ?? 0, dead: counts.dead ?? 0 },
      updates: {
        last_check_at: check?.checked_at ?? null,
        security_updates: check?.security_updates ?? null,
        regular_updates: check?.regular_updates ?? null,
        reboot_required: check?.reboot_required ?? null,
      },
      boot: this.o.system.bootStatus(),
      operator: { active_instance: this.o.operator.activeInstance() },
      agent_update: this.o.agentUpdate.newest(),
      connect: {
        public_key: this.o.identity.publicKey,
        fingerprint: this.o.identity.fingerprint,
        connection: this.o.connection?.status() ?? null,
      },
      readiness,
    };
  }

  private async checkReadiness(): Promise<Readiness> {
    const database = this.checkDatabase();
    const { caddyAdmin, listeners } = await this.checkCaddy();
    const checks = { database, caddy_admin: caddyAdmin, listeners };
    const ready = Object.values(checks).every((c) => c.status === "ok");
    return { status: ready ? "ready" : "not_ready", checks };
  }

  private checkDatabase(): Check {
    try {
      this.countQuery.get();
      return ok("answers");
    } catch (err) {
      return failing(`does not answer: ${(err as Error).message}`);
    }
  }

  /**
   * One read of the managed server's listen list proves the admin API answers and says what to connect to.
   * Caddy restarts its admin endpoint after every config change, and on a busy host a read can meet that
   * past its retries: then readiness follows Caddy's process, not that one read. When the list was read
   * within RELOAD_GRACE_MS and every listen address still accepts (Caddy hands its listeners from one config
   * to the next, and a stopped Caddy's refuse), Caddy is ready; otherwise the read's failure is the answer.
   */
  private async checkCaddy(): Promise<{ caddyAdmin: Check; listeners: Check }> {
    const server = this.o.server;
    // An embedded Caddy its supervisor saw exit is down now: said at once, not bridged by the read's retries.
    const before = this.o.embedded?.status();
    const down = this.embeddedDown(before);
    if (down) return down;
    let listen: string[] | undefined;
    try {
      // Retried as the agent's own reads are; a missing server (or a missing parent of it) reads as nothing.
      listen = await this.probeConfig.value<string[]>(["apps", "http", "servers", server, "listen"]);
      this.lastListen = { at: Date.now(), listen };
    } catch (err) {
      if (err instanceof CaddyApiError)
        return {
          caddyAdmin: failing(`answered ${err.status}: ${err.message}`),
          listeners: failing("unknown"),
        };
      const error = (err as Error).message;
      const result = await this.whileUnanswered(error);
      // The embedded Caddy may have exited, or been started again, meanwhile: then the listeners that
      // accepted may be a new Caddy's, which has not answered yet.
      const after = this.o.embedded?.status();
      if (before && after?.pid !== before.pid) return this.embeddedDown(after) ?? this.unanswered(error);
      return result;
    }
    const caddyAdmin = ok("answers");
    if (listen === undefined)
      return {
        caddyAdmin,
        listeners: this.o.embedded
          ? failing(`the managed server ${server} does not exist`)
          : ok(`the managed server ${server} does not exist yet; the first route creates it`),
      };
    return { caddyAdmin, listeners: await this.checkListeners(tcpAddresses(listen)) };
  }

  /** An embedded Caddy its supervisor saw exit is down now: said at once, not bridged by its listeners. */
  private embeddedDown(status: CaddyProcessStatus | undefined) {
    if (status?.state !== "restarting" && status?.state !== "stopped") return undefined;
    return {
      caddyAdmin: failing(`the embedded Caddy is ${status.state}`),
      listeners: failing("unknown: Caddy's admin API does not answer"),
    };
  }

  private unanswered(error: string) {
    return { caddyAdmin: failing(error), listeners: failing("unknown: Caddy's admin API does not answer") };
  }

  /** Caddy's admin API did not answer (`error`): ready only if its listeners, read lately, all still accept. */
  private async whileUnanswered(error: string): Promise<{ caddyAdmin: Check; listeners: Check }> {
    const last = this.lastListen;
    if (!last?.listen || Date.now() - last.at > RELOAD_GRACE_MS) return this.unanswered(error);
    const addresses = tcpAddresses(last.listen);
    const listeners = await this.checkListeners(addresses);
    if (listeners.status !== "ok" || addresses.length === 0) return { caddyAdmin: failing(error), listeners };
    const ago = Math.round((Date.now() - last.at) / 1000);
    return {
      caddyAdmin: ok(
        `not answering now (${error}), as while Caddy applies a config change; answered ${ago} s ago and its listeners accept`,
      ),
      listeners,
    };
  }

  /** A TCP connect to each TCP listen address of the managed server. */
  private async checkListeners(addresses: readonly TcpAddress[]): Promise<Check> {
    if (addresses.length === 0) return ok("no TCP listen address to check");
    const wildcardHost = this.remoteAdminHost();
    const results = await Promise.all(
      addresses.map(async (a) => ({ a, r: await accepts(a, PROBE_TIMEOUT_MS, wildcardHost) })),
    );
    const down = results.filter((x) => !x.r.ok);
    return down.length === 0
      ? ok(`bound: ${addresses.map(hostPort).join(", ")}`)
      : failing(`not bound: ${down.map((x) => `${hostPort(x.a)} (${x.r.error})`).join(", ")}`);
  }

  /** A Caddy whose admin API is on another host listens there: its wildcard addresses are tried on that host. */
  private remoteAdminHost(): string | undefined {
    const a = this.o.caddyAdmin.address;
    if (a.kind !== "tcp") return undefined;
    const host = a.url.hostname.replace(/^\[|\]$/g, "");
    return ["localhost", "127.0.0.1", "::1"].includes(host) ? undefined : host;
  }

  private async routeCount(): Promise<number | null> {
    try {
      // Read and counted only once per config Caddy loads: a status asked for by many clients does not read
      // and parse every route each time.
      return await this.routesCounted.get(async () => {
        const routes = await this.statusConfig.value<unknown[]>([
          "apps",
          "http",
          "servers",
          this.o.server,
          "routes",
        ]);
        return (routes ?? []).length;
      });
    } catch {
      // Caddy down or refusing: the status says so elsewhere; the count is unknown.
      return null;
    }
  }
}
