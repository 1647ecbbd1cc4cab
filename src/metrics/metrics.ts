import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { ConnectStatus } from "../connect/client.js";

/** What Caddy's admin API did with one request: the status class it answered, or `error` for no answer. */
export type CaddyRequestOutcome = "2xx" | "3xx" | "4xx" | "5xx" | "error";
/** Why a request to Caddy's admin API counts as an error. */
export type CaddyErrorReason = "unreachable" | "timeout" | "aborted" | "status";
/** How one delivery attempt of a callback ended. */
export type AttemptOutcome = "delivered" | "failed" | "dead" | "gone";
export type PackageOperationOutcome = "succeeded" | "failed" | "busy";

/** Every metric name starts with this; docs/logs-and-metrics.md lists each metric. */
const PREFIX = "hostkeeper_";

/**
 * The agent's metrics, on a registry of its own (never prom-client's global one), so every app built in one
 * process (the tests build many) has its own. The composition root builds one and hands each area the part it
 * records; each is recorded where the thing it counts happens. Values that already live elsewhere (the
 * outbox's rows, the supervisor's restart count) are read when scraped.
 */
export class Metrics {
  readonly registry = new Registry();

  readonly routeChanges = new Counter({
    name: `${PREFIX}route_changes_total`,
    help: "Route changes the agent recorded, by operation and outcome (as in the route's history).",
    labelNames: ["operation", "outcome"] as const,
    registers: [this.registry],
  });

  readonly routeWriteBatchSize = new Histogram({
    name: `${PREFIX}route_write_batch_size`,
    help: "Changes the route writer took from its queue together, to go to Caddy as one config change.",
    buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500],
    registers: [this.registry],
  });

  readonly caddyAdminDuration = new Histogram({
    name: `${PREFIX}caddy_admin_request_duration_seconds`,
    help: "Requests to Caddy's admin API, by method and outcome (status class answered, or error when none came).",
    labelNames: ["method", "outcome"] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });

  readonly caddyAdminErrors = new Counter({
    name: `${PREFIX}caddy_admin_errors_total`,
    help: "Requests to Caddy's admin API that failed: no answer (unreachable, timeout, aborted) or a write Caddy answered with a non-2xx status.",
    labelNames: ["method", "reason"] as const,
    registers: [this.registry],
  });

  readonly deliveryAttempts = new Counter({
    name: `${PREFIX}outbox_delivery_attempts_total`,
    help: "Callback delivery attempts, by outcome: delivered, failed (to be retried), dead (the last of the schedule), gone (the receiver answered 410).",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });

  readonly packageOperations = new Histogram({
    name: `${PREFIX}package_operation_duration_seconds`,
    help: "check-updates and apply-updates runs, by operation, package manager and outcome (busy: the package lock was not had in time).",
    labelNames: ["operation", "package_manager", "outcome"] as const,
    buckets: [0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800],
    registers: [this.registry],
  });

  readonly operatorUpdates = new Counter({
    name: `${PREFIX}operator_updates_total`,
    help: "Operator updates that reached a final state, by that state.",
    labelNames: ["state"] as const,
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: PREFIX });
  }

  /** The outbox's events by state, counted at each scrape. */
  readOutboxStates(count: () => Record<string, number>): void {
    new Gauge({
      name: `${PREFIX}outbox_events`,
      help: "Callback events in the outbox, by state (pending, delivered, dead), counted at scrape time.",
      labelNames: ["state"] as const,
      registers: [this.registry],
      collect() {
        const counts = count();
        for (const state of ["pending", "delivered", "dead"]) this.set({ state }, counts[state] ?? 0);
      },
    });
  }

  /** Restarts of the embedded Caddy, as counted by its supervisor (0 when the agent uses another's Caddy). */
  readCaddyRestarts(restarts: () => number): void {
    new Counter({
      name: `${PREFIX}caddy_restarts_total`,
      help: "Times the agent started its embedded Caddy again after it exited, since the agent started.",
      registers: [this.registry],
      collect() {
        // The supervisor owns the count; the counter shows it rather than keeping a second one.
        this.reset();
        this.inc(restarts());
      },
    });
  }

  /** The connection to the control plane (connect/client.ts): the client counts, these show its counts. */
  readConnection(status: () => ConnectStatus): void {
    const registers = [this.registry];
    new Gauge({
      name: `${PREFIX}connect_connected`,
      help: "1 while the connection to the control plane is up (past its handshake), else 0.",
      registers,
      collect() {
        this.set(status().state === "connected" ? 1 : 0);
      },
    });
    const counters: [string, string, (s: ConnectStatus) => number][] = [
      [
        "connect_reconnects_total",
        "Connections to the control plane lost or failed since the agent started.",
        (s) => s.reconnects,
      ],
      ["connect_frames_received_total", "Frames received from the control plane.", (s) => s.frames_in],
      ["connect_frames_sent_total", "Frames sent to the control plane.", (s) => s.frames_out],
      ["connect_received_bytes_total", "Bytes of frames received from the control plane.", (s) => s.bytes_in],
      ["connect_sent_bytes_total", "Bytes of frames sent to the control plane.", (s) => s.bytes_out],
    ];
    for (const [name, help, read] of counters)
      new Counter({
        name: `${PREFIX}${name}`,
        help,
        registers,
        collect() {
          this.reset();
          this.inc(read(status()));
        },
      });
  }

  /**
   * The certificates of the list (`GET /v1/proxy/certificates`), computed when scraped: each one's expiry
   * by name (the host, or a custom certificate's own name) and source, and how many entries have each
   * status. A scrape while Caddy cannot be read shows none rather than failing the whole scrape.
   */
  readCertificates(
    list: () => Promise<
      {
        host: string | null;
        name: string | null;
        source: string | null;
        status: string;
        not_after: string | null;
      }[]
    >,
  ): void {
    type Entries = Awaited<ReturnType<typeof list>>;
    // One list per scrape for both gauges (the registry reads them at once); none when Caddy cannot be read.
    let pending: Promise<Entries | undefined> | undefined;
    const snapshot = () => {
      pending ??= list()
        .catch(() => undefined)
        .finally(() => {
          pending = undefined;
        });
      return pending;
    };
    new Gauge({
      name: `${PREFIX}certificate_expiry_timestamp_seconds`,
      help: "When each certificate of the certificates list expires (Unix time), by name (the host, or a custom certificate's name) and source (acme, internal, custom); computed at scrape time.",
      labelNames: ["name", "source"] as const,
      registers: [this.registry],
      async collect() {
        this.reset();
        for (const e of (await snapshot()) ?? []) {
          const name = e.host ?? e.name;
          if (e.not_after !== null && e.source !== null && name !== null)
            this.set({ name, source: e.source }, Date.parse(e.not_after) / 1000);
        }
      },
    });
    new Gauge({
      name: `${PREFIX}certificates`,
      help: "Entries of the certificates list by status (valid, expiring, expired, missing): one per host of the managed server's routes and one per custom certificate; computed at scrape time.",
      labelNames: ["status"] as const,
      registers: [this.registry],
      async collect() {
        this.reset();
        const entries = await snapshot();
        if (entries === undefined) return;
        const counts: Record<string, number> = { valid: 0, expiring: 0, expired: 0, missing: 0 };
        for (const e of entries) counts[e.status] = (counts[e.status] ?? 0) + 1;
        for (const [status, n] of Object.entries(counts)) this.set({ status }, n);
      },
    });
  }

  /**
   * The host's patch state (`GET /v1/system/compliance`), read from the agent's records when scraped: what
   * a fleet's dashboard and alerts need, by package manager (apt, dnf). A gauge without a value (none
   * pending, no reboot required, no apply yet) has no sample rather than a 0 that would mean something.
   */
  readCompliance(
    manager: string,
    read: () => {
      security_updates_pending: number;
      oldest_security_update_age_seconds: number | null;
      reboot_required_since: string | null;
      last_successful_apply_at: string | null;
    },
  ): void {
    const gauge = (name: string, help: string, value: (c: ReturnType<typeof read>) => number | null) =>
      new Gauge({
        name: `${PREFIX}${name}`,
        help,
        labelNames: ["package_manager"] as const,
        registers: [this.registry],
        collect() {
          this.reset();
          const v = value(read());
          if (v !== null) this.set({ package_manager: manager }, v);
        },
      });
    const unix = (iso: string | null) => (iso === null ? null : Date.parse(iso) / 1000);
    gauge(
      "security_updates_pending",
      "Packages with a security update not installed, as of the last check and the applies since.",
      (c) => c.security_updates_pending,
    );
    gauge(
      "oldest_pending_security_update_age_seconds",
      "Since the agent first saw the oldest pending security update offered; absent when none is pending.",
      (c) => c.oldest_security_update_age_seconds,
    );
    gauge(
      "reboot_required_since_timestamp_seconds",
      "Since when (Unix time, the first check that found it) a reboot is required; absent when none is.",
      (c) => unix(c.reboot_required_since),
    );
    gauge(
      "last_successful_apply_timestamp_seconds",
      "When the last apply that succeeded finished (Unix time); absent when none has.",
      (c) => unix(c.last_successful_apply_at),
    );
  }

  /** The text a Prometheus scrape gets. */
  exposition(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/** Seconds since `startNs` (from `process.hrtime.bigint()`). */
export const secondsSince = (startNs: bigint): number => Number(process.hrtime.bigint() - startNs) / 1e9;
