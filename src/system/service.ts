import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import type { Logger } from "pino";
import type { Outbox } from "../events/outbox.js";
import { type Metrics, type PackageOperationOutcome, secondsSince } from "../metrics/metrics.js";
import type { Db, Migration } from "../store/db.js";
import { CHILD_ENV, childEnv } from "../util/child-env.js";
import { settledWithin } from "../util/timers.js";
import {
  type ApplyRow,
  ApplyStore,
  applyStateMigrations,
  changesOf,
  nextProgress,
  type Progress,
  type StoredResult,
} from "./applies.js";
import { BootLog, type BootSources, currentBoot } from "./boot.js";
import { ApplyFailedError, ApplyNotFoundError, isSystemError, PackageManagerBusyError } from "./errors.js";
import { Mutex } from "./mutex.js";
import {
  highestSeverity,
  type PackageManager,
  type PackageManagerName,
  SEVERITIES,
  type Severity,
  type UpdateType,
} from "./package-manager.js";
import type {
  ApplyRecord,
  ApplyResult,
  ApplyStatus,
  DownloadResult,
  RebootReport,
  Requester,
  SystemStatus,
} from "./schemas.js";

export const systemMigrations: Migration[] = [
  {
    name: "system.001_applies",
    sql: `
      CREATE TABLE system_applies (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        request_id TEXT NOT NULL,
        requested_by TEXT NOT NULL,
        update_type TEXT NOT NULL CHECK (update_type IN ('security', 'full')),
        auto_reboot INTEGER NOT NULL,
        package_manager TEXT NOT NULL,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        duration_ms INTEGER,
        outcome TEXT NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed', 'interrupted')),
        error TEXT,
        result TEXT
      );`,
  },
  {
    name: "system.002_last_check",
    sql: `
      CREATE TABLE system_last_check (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        checked_at TEXT NOT NULL,
        package_manager TEXT NOT NULL,
        security_updates INTEGER NOT NULL,
        regular_updates INTEGER NOT NULL,
        reboot_required INTEGER NOT NULL
      );`,
  },
  ...applyStateMigrations,
];

/** The last successful check-updates: when, and what it found. */
export interface LastCheck {
  checked_at: string;
  package_manager: PackageManagerName;
  security_updates: number;
  regular_updates: number;
  reboot_required: boolean;
}

export interface SystemServiceOptions {
  db: Db;
  manager: PackageManager;
  /** How long a check or apply waits for another apply of this agent. */
  lockTimeoutMs: number;
  rebootCommand: readonly string[];
  rebootDelayMs: number;
  /** Where the boot id and the running kernel are read. */
  boot: BootSources;
  /** Where the `system_update` events of applies with a callback are written. */
  outbox: Outbox;
  env: NodeJS.ProcessEnv;
  log: Logger;
  metrics?: Metrics;
}

/** The host's boot as `GET /v1/status` shows it. */
export interface BootStatus {
  boot_id: string | null;
  booted_at: string | null;
  kernel: string | null;
  last_reboot: {
    previous_boot_id: string;
    detected_at: string;
    planned: boolean;
    apply_id: number | null;
  } | null;
}

/** How long the start in a new boot waits to learn whether a reboot is still required. */
const BACK_ONLINE_CHECK_MS = 30_000;

const CANCELLED_REBOOT = "the agent stopped before the reboot was due; the reboot command did not run";

/**
 * System package updates: check and apply, one at a time in this agent, each apply recorded with who
 * asked and what changed; a requested reboot runs after the response has been sent.
 */
export class SystemService {
  private readonly mutex = new Mutex();
  private readonly store: ApplyStore;
  private readonly boots: BootLog;
  /** Progress of the applies under way (persisted at each state change). */
  private readonly live = new Map<number, Progress>();
  /** The apply whose reboot is scheduled, until the reboot command starts. */
  private rebootApply: number | undefined;
  private readonly listApplies;
  private readonly recordCheck;
  private readonly readLastCheck;
  private managerVersion: Promise<string | undefined> | undefined;
  private rebootTimer: NodeJS.Timeout | undefined;
  private rebootChild: ChildProcess | undefined;
  private closed = false;

  constructor(private readonly o: SystemServiceOptions) {
    this.store = new ApplyStore(o.db, o.outbox);
    this.boots = new BootLog(o.db);
    this.listApplies = o.db.prepare("SELECT * FROM system_applies ORDER BY id DESC LIMIT ?");
    this.recordCheck = o.db.prepare(
      `INSERT OR REPLACE INTO system_last_check (id, checked_at, package_manager, security_updates, regular_updates, reboot_required)
       VALUES (1, ?, ?, ?, ?, ?)`,
    );
    this.readLastCheck = o.db.prepare("SELECT * FROM system_last_check WHERE id = 1");
    // An apply still "running" in the database was cut short by a stop of the agent.
    for (const row of this.store.inStates(["queued", "downloading", "installing"])) {
      this.store.transition(row.id, "interrupted", {
        outcome: "interrupted",
        finished_at: new Date().toISOString(),
        error: { code: "interrupted", detail: "the agent stopped during the apply" },
      });
      o.log.warn({ apply_id: row.id }, `apply ${row.id} was interrupted by a stop of the agent`);
    }
  }

  /**
   * Called once the agent is ready: records the boot it runs in. In a new boot, the applies whose reboot was
   * scheduled in an earlier one are `back_online`; a new boot without such an apply is an unplanned reboot.
   * In the same boot, a reboot scheduled by a run of the agent that stopped before it was due did not happen.
   */
  async start(): Promise<void> {
    const boot = currentBoot(this.o.boot);
    if (boot === undefined) return;
    const last = this.boots.last();
    if (last?.boot_id === boot.boot_id) {
      for (const row of this.store.inStates(["reboot_scheduled"]))
        this.store.transition(row.id, "completed", {
          reboot: { ...(rebootOf(row) as RebootReport), error: CANCELLED_REBOOT },
        });
      return;
    }
    const rebooted = this.store
      .inStates(["reboot_scheduled", "rebooting"])
      .filter((r) => rebootOf(r)?.boot_id_before !== boot.boot_id);
    const planned = rebooted.at(-1);
    let stillRequired: boolean | null = null;
    if (planned !== undefined) {
      // Bounded: the agent's start waits for it.
      const asked = this.o.manager.rebootRequired().then(
        (v) => {
          stillRequired = v;
        },
        () => undefined,
      );
      await settledWithin(asked, BACK_ONLINE_CHECK_MS);
    }
    const now = new Date().toISOString();
    this.o.db.transaction(() => {
      this.boots.record(boot, last?.boot_id ?? null, planned?.id ?? null);
      for (const row of rebooted)
        this.store.transition(row.id, "back_online", {
          reboot: {
            ...(rebootOf(row) as RebootReport),
            boot_id_after: boot.boot_id,
            kernel_after: boot.kernel,
            back_online_at: now,
            reboot_required_after: row === planned ? stillRequired : null,
          },
        });
    })();
    if (planned !== undefined) {
      const before = rebootOf(planned);
      this.o.log.info(
        {
          apply_id: planned.id,
          boot_id: boot.boot_id,
          kernel_before: before?.kernel_before,
          kernel_after: boot.kernel,
        },
        `the host is back online after the reboot of apply ${planned.id}`,
      );
    } else if (last !== undefined)
      this.o.log.warn(
        { boot_id: boot.boot_id, previous_boot_id: last.boot_id, booted_at: boot.booted_at },
        "the host rebooted without a reboot scheduled by the agent",
      );
  }

  /** The boot the agent runs in and the last reboot it noticed. */
  bootStatus(): BootStatus {
    const boot = currentBoot(this.o.boot);
    const seen = this.boots.last();
    const current = seen !== undefined && seen.boot_id === boot?.boot_id ? seen : undefined;
    const reboot = this.boots.lastReboot();
    return {
      boot_id: boot?.boot_id ?? null,
      booted_at: current?.booted_at ?? boot?.booted_at ?? null,
      kernel: boot?.kernel ?? null,
      last_reboot:
        reboot?.previous_boot_id == null
          ? null
          : {
              previous_boot_id: reboot.previous_boot_id,
              detected_at: reboot.seen_at,
              planned: reboot.planned_apply_id !== null,
              apply_id: reboot.planned_apply_id,
            },
    };
  }

  check(): Promise<SystemStatus> {
    return this.measured("check", () => this.checkNow());
  }

  private checkNow(): Promise<SystemStatus> {
    return this.exclusive(async () => {
      const updates = await this.o.manager.check();
      const rebootRequired = await this.o.manager.rebootRequired();
      const security = updates.filter((u) => u.security).length;
      const checkedAt = new Date().toISOString();
      const severityCounts = Object.fromEntries(SEVERITIES.map((s) => [s, 0])) as Record<Severity, number>;
      for (const u of updates) severityCounts[highestSeverity(u.advisories)]++;
      this.recordCheck.run(
        checkedAt,
        this.o.manager.name,
        security,
        updates.length - security,
        rebootRequired ? 1 : 0,
      );
      return {
        packages: [...new Set(updates.map((u) => u.name))],
        security_updates: security,
        regular_updates: updates.length - security,
        updates_available: updates.length > 0,
        reboot_required: rebootRequired,
        package_manager: this.o.manager.name,
        checked_at: checkedAt,
        severity_counts: severityCounts,
        updates,
      };
    });
  }

  /** The last check that succeeded, across restarts of the agent; null before the first. */
  lastCheck(): LastCheck | null {
    const row = this.readLastCheck.get() as
      | (Omit<LastCheck, "reboot_required"> & { reboot_required: number })
      | undefined;
    return row === undefined
      ? null
      : {
          checked_at: row.checked_at,
          package_manager: row.package_manager,
          security_updates: row.security_updates,
          regular_updates: row.regular_updates,
          reboot_required: row.reboot_required === 1,
        };
  }

  get packageManager(): PackageManagerName {
    return this.o.manager.name;
  }

  /** The package manager's version, asked once (again after a failure); undefined when it cannot say. */
  packageManagerVersion(): Promise<string | undefined> {
    this.managerVersion ??= this.o.manager.version().then(
      (v) => {
        if (v === undefined) this.managerVersion = undefined;
        return v;
      },
      () => {
        this.managerVersion = undefined;
        return undefined;
      },
    );
    return this.managerVersion;
  }

  /** Applies updates and records the apply; a scheduled reboot waits for `startScheduledReboot`. */
  apply(type: UpdateType, autoReboot: boolean, who: Requester, callbackUrl?: string): Promise<ApplyResult> {
    const id = this.create(type, autoReboot, who, callbackUrl);
    return this.measured("apply", () => this.runApply(id, type, autoReboot));
  }

  /**
   * Starts an apply in the background and answers its status (`queued`) at once; `done` settles when the
   * package work is over. A reboot it schedules starts its delay at once (there is no response to wait for).
   */
  startApply(
    type: UpdateType,
    autoReboot: boolean,
    who: Requester,
    callbackUrl?: string,
  ): { status: ApplyStatus; done: Promise<void> } {
    const id = this.create(type, autoReboot, who, callbackUrl);
    // Started on the next turn, so the answer shows the apply `queued`, as it was accepted.
    const job = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => this.measured("apply", () => this.runApply(id, type, autoReboot)))
      .then(
        (r) => {
          if (r.reboot_scheduled) this.startScheduledReboot();
        },
        () => {
          // Recorded in the apply's state and logged.
        },
      );
    return { status: this.status(id), done: job };
  }

  /** The status of apply `id` (any apply, synchronous ones included). */
  status(id: number): ApplyStatus {
    const row = this.store.get(id);
    if (!row) throw new ApplyNotFoundError(id);
    return this.store.status(row, this.live.get(id));
  }

  /** Downloads what an apply of `type` would install, without installing; one at a time with checks and applies. */
  download(type: UpdateType): Promise<DownloadResult> {
    return this.exclusive(async () => {
      const started = new Date();
      const r = await this.o.manager.download(type);
      const finished = new Date();
      const ms = finished.getTime() - started.getTime();
      this.o.log.info(
        {
          update_type: type,
          packages: r.planned.length,
          files: r.files.length,
          bytes: r.bytes,
          duration_ms: ms,
        },
        `download of ${type} updates: ${r.files.length} files, ${r.bytes} bytes`,
      );
      return {
        update_type: type,
        package_manager: this.o.manager.name,
        packages: r.planned.map((u) => ({
          name: u.name,
          arch: u.arch,
          current_version: u.current_version,
          new_version: type === "security" && u.security_version ? u.security_version : u.new_version,
        })),
        downloaded: r.files,
        bytes: r.bytes,
        started_at: started.toISOString(),
        finished_at: finished.toISOString(),
        duration_ms: ms,
      };
    });
  }

  private create(
    type: UpdateType,
    autoReboot: boolean,
    who: Requester,
    callbackUrl: string | undefined,
  ): number {
    return this.store.create({
      request_id: who.request_id,
      requested_by: JSON.stringify({ remote_address: who.remote_address, user_agent: who.user_agent }),
      update_type: type,
      auto_reboot: autoReboot,
      package_manager: this.o.manager.name,
      callback_url: callbackUrl ?? null,
      at: new Date().toISOString(),
    });
  }

  /** Called from the package manager's output stream: it must not throw (the database may be closed by now). */
  private onProgress(id: number, report: Parameters<typeof nextProgress>[1]): void {
    const before = this.live.get(id) ?? { download: null, install: null };
    const progress = nextProgress(before, report);
    this.live.set(id, progress);
    if (report.phase !== "installing" || before.install !== null || this.closed) return;
    try {
      this.store.transition(id, "installing", { progress });
    } catch (err) {
      this.o.log.error({ err, apply_id: id }, "the apply's state could not be recorded");
    }
  }

  /** Times a check or an apply, the wait for the lock included, and counts it by how it ended. */
  private async measured<T>(operation: "check" | "apply", run: () => Promise<T>): Promise<T> {
    const started = process.hrtime.bigint();
    let outcome: PackageOperationOutcome = "failed";
    try {
      const result = await run();
      outcome = "succeeded";
      return result;
    } catch (err) {
      const cause = err instanceof ApplyFailedError ? err.cause : err;
      if (cause instanceof PackageManagerBusyError) outcome = "busy";
      throw err;
    } finally {
      this.o.metrics?.packageOperations.observe(
        { operation, package_manager: this.o.manager.name, outcome },
        secondsSince(started),
      );
    }
  }

  private async runApply(id: number, type: UpdateType, autoReboot: boolean): Promise<ApplyResult> {
    const row = this.store.get(id) as ApplyRow;
    const started = new Date(row.started_at);
    const finish = (
      outcome: "succeeded" | "failed",
      error: ApplyStatus["error"],
      result: StoredResult | null,
    ) => {
      const finished = new Date();
      const ms = finished.getTime() - started.getTime();
      const progress = this.live.get(id);
      this.live.delete(id);
      const rebootAt = result?.reboot_scheduled
        ? new Date(Date.now() + this.o.rebootDelayMs).toISOString()
        : null;
      const boot = currentBoot(this.o.boot);
      this.store.transition(
        id,
        outcome === "failed" ? "failed" : rebootAt ? "reboot_scheduled" : "completed",
        {
          outcome,
          finished_at: finished.toISOString(),
          duration_ms: ms,
          error,
          ...(result === null ? {} : { result }),
          ...(progress === undefined ? {} : { progress }),
          ...(rebootAt === null
            ? {}
            : {
                reboot_at: rebootAt,
                reboot: {
                  boot_id_before: boot?.boot_id ?? null,
                  kernel_before: boot?.kernel ?? null,
                  command_started_at: null,
                  boot_id_after: null,
                  kernel_after: null,
                  back_online_at: null,
                  reboot_required_after: null,
                  error: null,
                },
              }),
        },
      );
      if (rebootAt !== null) this.rebootApply = id;
      // The one line an apply leaves in the log: what was asked, how it ended, what it changed.
      const fields = {
        apply_id: id,
        update_type: type,
        auto_reboot: autoReboot,
        package_manager: this.o.manager.name,
        outcome,
        upgraded: result?.upgraded.length ?? 0,
        installed: result?.installed.length ?? 0,
        removed: result?.removed.length ?? 0,
        held_back: result?.held_back.length ?? 0,
        reboot_required: result?.reboot_required ?? null,
        reboot_scheduled: result?.reboot_scheduled ?? false,
        duration_ms: ms,
        request_id: row.request_id,
        ...(error === null ? {} : { error }),
      };
      if (outcome === "succeeded") this.o.log.info(fields, `apply of ${type} updates succeeded`);
      else this.o.log.warn(fields, `apply of ${type} updates failed`);
      return { finished_at: finished.toISOString(), duration_ms: ms, reboot_at: rebootAt };
    };
    try {
      const result = await this.exclusive(async () => {
        this.store.transition(id, "downloading");
        this.live.set(id, { download: null, install: null });
        const recovery = await this.o.manager.recover(this.store.previousInterrupted(id));
        if (recovery) {
          this.store.update(id, { recovery });
          this.o.log.warn({ apply_id: id, recovery }, `apply ${id}: ${recovery.detail}`);
        }
        const changes = await this.o.manager.apply(type, {
          planned: (updates) => this.store.update(id, { planned: updates }),
          progress: (p) => this.onProgress(id, p),
        });
        const rebootRequired = await this.o.manager.rebootRequired();
        // The packages are installed by now: a failure to list services must not turn the apply into a failure.
        const services = await this.o.manager.servicesToRestart().catch((err: unknown) => {
          this.o.log.warn({ err }, "the services to restart could not be listed");
          return undefined;
        });
        return {
          ...changes,
          reboot_required: rebootRequired,
          services_restart_required: services ?? null,
          reboot_scheduled: autoReboot && rebootRequired && !this.closed,
        };
      });
      const times = finish("succeeded", null, result);
      return {
        id,
        update_type: type,
        package_manager: this.o.manager.name,
        ...result,
        started_at: started.toISOString(),
        ...times,
      };
    } catch (err) {
      if (this.closed) throw err;
      // Recorded as the client sees it: an unexpected error's own message stays in the log.
      if (!isSystemError(err)) {
        finish(
          "failed",
          { code: "internal_error", detail: "the agent failed unexpectedly; see its log" },
          null,
        );
        throw err;
      }
      finish("failed", { code: err.code, detail: err.message }, null);
      throw new ApplyFailedError(id, err);
    }
  }

  history(limit: number): ApplyRecord[] {
    return (this.listApplies.all(limit) as ApplyRow[]).map((r) => {
      return {
        id: r.id,
        state: r.state,
        request_id: r.request_id,
        requested_by: JSON.parse(r.requested_by) as ApplyRecord["requested_by"],
        update_type: r.update_type,
        auto_reboot: r.auto_reboot === 1,
        package_manager: r.package_manager,
        started_at: r.started_at,
        finished_at: r.finished_at,
        duration_ms: r.duration_ms,
        outcome: r.outcome,
        error: r.error === null ? null : (JSON.parse(r.error) as ApplyRecord["error"]),
        ...changesOf(r.result),
      };
    });
  }

  /** Starts the delay before the reboot command; called once the apply's response has been sent. */
  startScheduledReboot(): void {
    if (this.closed || this.rebootTimer !== undefined || this.rebootApply === undefined) return;
    this.o.log.warn({ delayMs: this.o.rebootDelayMs }, "a reboot is required; rebooting after the delay");
    this.rebootTimer = setTimeout(() => this.reboot(), this.o.rebootDelayMs);
  }

  /**
   * Cancels a pending reboot (its apply is then `completed`, saying so) and waits (bounded) for a reboot
   * command already started. Async applies under way are left: the next start records them as interrupted.
   */
  async close(): Promise<void> {
    this.closed = true;
    const id = this.rebootApply;
    if (this.rebootChild === undefined && id !== undefined) {
      this.o.log.warn({ apply_id: id }, "the agent is stopping; the scheduled reboot is cancelled");
      this.rebootError(id, CANCELLED_REBOOT);
    }
    clearTimeout(this.rebootTimer);
    const child = this.rebootChild;
    if (child && child.exitCode === null && child.signalCode === null)
      await settledWithin(once(child, "exit"), 5_000);
  }

  /** The apply is `rebooting` before the command runs: the command may stop the agent at once. */
  private reboot(): void {
    const id = this.rebootApply;
    const [file, ...args] = this.o.rebootCommand;
    if (file === undefined || id === undefined) return;
    this.rebootApply = undefined;
    const row = this.store.get(id);
    if (row) {
      const report = rebootOf(row) as RebootReport;
      this.store.transition(id, "rebooting", {
        reboot: { ...report, command_started_at: new Date().toISOString() },
      });
    }
    this.o.log.warn({ command: this.o.rebootCommand, apply_id: id }, "running the reboot command");
    const child = spawn(file, args, { env: childEnv(this.o.env, CHILD_ENV.reboot), stdio: "ignore" });
    this.rebootChild = child;
    child.once("error", (err) => {
      this.o.log.error({ err }, "the reboot command could not be started");
      this.rebootError(id, `the reboot command could not be started: ${err.message}`);
    });
    child.once("exit", (code, signal) => {
      if (code === 0) return;
      this.o.log.error({ code, signal }, "the reboot command failed");
      this.rebootError(
        id,
        `the reboot command failed (${code === null ? `signal ${signal}` : `exit ${code}`})`,
      );
    });
  }

  /** The reboot did not happen: the apply is `completed`, its reboot report says why. */
  private rebootError(id: number, error: string): void {
    try {
      const row = this.store.get(id);
      if (!row || (row.state !== "reboot_scheduled" && row.state !== "rebooting")) return;
      this.store.transition(id, "completed", { reboot: { ...(rebootOf(row) as RebootReport), error } });
    } catch (err) {
      this.o.log.error({ err, apply_id: id }, "the failed reboot could not be recorded");
    }
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    return this.mutex.run(
      this.o.lockTimeoutMs,
      () =>
        new PackageManagerBusyError(
          { lock: "the package lock of this agent", pid: process.pid, name: "another check or apply" },
          this.o.lockTimeoutMs,
        ),
      fn,
    );
  }
}

const rebootOf = (row: ApplyRow): RebootReport | null =>
  row.reboot === null ? null : (JSON.parse(row.reboot) as RebootReport);
