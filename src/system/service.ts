import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import type { Logger } from "pino";
import { type Metrics, type PackageOperationOutcome, secondsSince } from "../metrics/metrics.js";
import type { Db, Migration } from "../store/db.js";
import { CHILD_ENV, childEnv } from "../util/child-env.js";
import { settledWithin } from "../util/timers.js";
import { ApplyFailedError, isSystemError, PackageManagerBusyError } from "./errors.js";
import { Mutex } from "./mutex.js";
import type { ApplyChanges, PackageManager, PackageManagerName, UpdateType } from "./package-manager.js";
import type { ApplyRecord, ApplyResult, Requester, SystemStatus } from "./schemas.js";

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
];

/** The last successful check-updates: when, and what it found. */
export interface LastCheck {
  checked_at: string;
  package_manager: PackageManagerName;
  security_updates: number;
  regular_updates: number;
  reboot_required: boolean;
}

interface ApplyRow {
  id: number;
  request_id: string;
  requested_by: string;
  update_type: UpdateType;
  auto_reboot: number;
  package_manager: PackageManagerName;
  started_at: string;
  finished_at: string | null;
  duration_ms: number | null;
  outcome: ApplyRecord["outcome"];
  error: string | null;
  result: string | null;
}

type StoredResult = ApplyChanges & { reboot_required: boolean; reboot_scheduled: boolean };

export interface SystemServiceOptions {
  db: Db;
  manager: PackageManager;
  /** How long a check or apply waits for another apply of this agent. */
  lockTimeoutMs: number;
  rebootCommand: readonly string[];
  rebootDelayMs: number;
  env: NodeJS.ProcessEnv;
  log: Logger;
  metrics?: Metrics;
}

/**
 * System package updates: check and apply, one at a time in this agent, each apply recorded with who
 * asked and what changed; a requested reboot runs after the response has been sent.
 */
export class SystemService {
  private readonly mutex = new Mutex();
  private readonly insertApply;
  private readonly finishApply;
  private readonly listApplies;
  private readonly recordCheck;
  private readonly readLastCheck;
  private managerVersion: Promise<string | undefined> | undefined;
  private rebootTimer: NodeJS.Timeout | undefined;
  private rebootChild: ChildProcess | undefined;
  private closed = false;

  constructor(private readonly o: SystemServiceOptions) {
    this.insertApply = o.db.prepare(
      `INSERT INTO system_applies (request_id, requested_by, update_type, auto_reboot, package_manager, started_at, outcome)
       VALUES (?, ?, ?, ?, ?, ?, 'running')`,
    );
    this.finishApply = o.db.prepare(
      "UPDATE system_applies SET finished_at = ?, duration_ms = ?, outcome = ?, error = ?, result = ? WHERE id = ?",
    );
    this.listApplies = o.db.prepare("SELECT * FROM system_applies ORDER BY id DESC LIMIT ?");
    this.recordCheck = o.db.prepare(
      `INSERT OR REPLACE INTO system_last_check (id, checked_at, package_manager, security_updates, regular_updates, reboot_required)
       VALUES (1, ?, ?, ?, ?, ?)`,
    );
    this.readLastCheck = o.db.prepare("SELECT * FROM system_last_check WHERE id = 1");
    // An apply still "running" in the database was cut short by a stop of the agent.
    o.db
      .prepare("UPDATE system_applies SET outcome = 'interrupted', finished_at = ? WHERE outcome = 'running'")
      .run(new Date().toISOString());
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
  apply(type: UpdateType, autoReboot: boolean, who: Requester): Promise<ApplyResult> {
    return this.measured("apply", () => this.applyNow(type, autoReboot, who));
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

  private async applyNow(type: UpdateType, autoReboot: boolean, who: Requester): Promise<ApplyResult> {
    const started = new Date();
    const id = Number(
      this.insertApply.run(
        who.request_id,
        JSON.stringify({ remote_address: who.remote_address, user_agent: who.user_agent }),
        type,
        autoReboot ? 1 : 0,
        this.o.manager.name,
        started.toISOString(),
      ).lastInsertRowid,
    );
    const finish = (outcome: "succeeded" | "failed", error: unknown, result: StoredResult | null) => {
      const finished = new Date();
      const ms = finished.getTime() - started.getTime();
      this.finishApply.run(
        finished.toISOString(),
        ms,
        outcome,
        error === null ? null : JSON.stringify(error),
        result === null ? null : JSON.stringify(result),
        id,
      );
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
        request_id: who.request_id,
        ...(error === null ? {} : { error }),
      };
      if (outcome === "succeeded") this.o.log.info(fields, `apply of ${type} updates succeeded`);
      else this.o.log.warn(fields, `apply of ${type} updates failed`);
      return { finished_at: finished.toISOString(), duration_ms: ms };
    };
    try {
      const result = await this.exclusive(async () => {
        const changes = await this.o.manager.apply(type);
        const rebootRequired = await this.o.manager.rebootRequired();
        return {
          ...changes,
          reboot_required: rebootRequired,
          reboot_scheduled: autoReboot && rebootRequired && !this.closed,
        };
      });
      const times = finish("succeeded", null, result);
      return {
        id,
        update_type: type,
        package_manager: this.o.manager.name,
        ...result,
        reboot_at: result.reboot_scheduled ? new Date(Date.now() + this.o.rebootDelayMs).toISOString() : null,
        started_at: started.toISOString(),
        ...times,
      };
    } catch (err) {
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
      const result = r.result === null ? null : (JSON.parse(r.result) as StoredResult);
      return {
        id: r.id,
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
        upgraded: result?.upgraded ?? [],
        installed: result?.installed ?? [],
        removed: result?.removed ?? [],
        held_back: result?.held_back ?? [],
        reboot_required: result?.reboot_required ?? null,
        reboot_scheduled: result?.reboot_scheduled ?? false,
      };
    });
  }

  /** Starts the delay before the reboot command; called once the apply's response has been sent. */
  startScheduledReboot(): void {
    if (this.closed || this.rebootTimer !== undefined) return;
    this.o.log.warn({ delayMs: this.o.rebootDelayMs }, "a reboot is required; rebooting after the delay");
    this.rebootTimer = setTimeout(() => this.reboot(), this.o.rebootDelayMs);
  }

  /** Cancels a pending reboot and waits (bounded) for a reboot command already started. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.rebootTimer !== undefined && this.rebootChild === undefined)
      this.o.log.warn("the agent is stopping; the scheduled reboot is cancelled");
    clearTimeout(this.rebootTimer);
    const child = this.rebootChild;
    if (child && child.exitCode === null && child.signalCode === null)
      await settledWithin(once(child, "exit"), 5_000);
  }

  private reboot(): void {
    const [file, ...args] = this.o.rebootCommand;
    if (file === undefined) return;
    this.o.log.warn({ command: this.o.rebootCommand }, "running the reboot command");
    const child = spawn(file, args, { env: childEnv(this.o.env, CHILD_ENV.reboot), stdio: "ignore" });
    this.rebootChild = child;
    child.once("error", (err) => this.o.log.error({ err }, "the reboot command could not be started"));
    child.once("exit", (code, signal) => {
      if (code !== 0) this.o.log.error({ code, signal }, "the reboot command failed");
    });
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
