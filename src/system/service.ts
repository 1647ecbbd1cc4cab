import { setImmediate } from "node:timers/promises";
import type { Logger } from "pino";
import type { Outbox } from "../events/outbox.js";
import { type Metrics, type PackageOperationOutcome, secondsSince } from "../metrics/metrics.js";
import type { Db } from "../store/db.js";
import { ApplyStore, type ApplyTrigger } from "./applies.js";
import { ApplyRun, type RebootWindow } from "./apply-run.js";
import { CandidateStore, eligibleAt, type MinAge, sightings } from "./candidates.js";
import { type Compliance, complianceOf } from "./compliance.js";
import { DiskGuard } from "./disk-guard.js";
import { ApplyFailedError, PackageManagerBusyError } from "./errors.js";
import type { Hooks } from "./hooks/hooks.js";
import { type LastCheck, LastCheckStore } from "./last-check.js";
import { PackageLock } from "./mutex.js";
import {
  highestSeverity,
  type PackageManager,
  type PackageManagerName,
  SEVERITIES,
  type Severity,
  type UpdateType,
} from "./packages/package-manager.js";
import type { BootSources } from "./restarts/boot.js";
import { type BootStatus, Reboots } from "./restarts/reboot.js";
import type { ServiceToRestart } from "./restarts/restart-scan.js";
import type { RestartFinder } from "./restarts/services-restart.js";
import type {
  ApplyRecord,
  ApplyResult,
  ApplyStatus,
  DownloadResult,
  Requester,
  SystemStatus,
} from "./schemas.js";

export interface SystemServiceOptions {
  db: Db;
  manager: PackageManager;
  /** Finds the services running replaced code, after each check and apply. */
  restarts: Pick<RestartFinder, "find">;
  /** HOSTKEEPER_MIN_FREE_MB: what the disk guard keeps free beyond what a download or apply needs. */
  minFreeMb: number;
  /** How long a check or apply waits for another apply of this agent. */
  lockTimeoutMs: number;
  rebootCommand: readonly string[];
  rebootDelayMs: number;
  /** Where the boot id and the running kernel are read. */
  boot: BootSources;
  /** Where the `system_update` events of applies with a callback are written. */
  outbox: Outbox;
  /** The host's hooks (HOSTKEEPER_HOOKS_DIR), run around applies and after their reboots. */
  hooks: Hooks;
  env: NodeJS.ProcessEnv;
  /** The clock of the applies' times and of their windows (the composition's, which tests control). */
  now: () => number;
  log: Logger;
  metrics?: Metrics;
}

/**
 * What started an apply (default the API); for a scheduled one, the slot it runs for (its start, UTC),
 * whose claim it takes over, and the reboot its window allows (none when the schedule never reboots).
 */
export interface ApplyOrigin {
  trigger?: ApplyTrigger;
  slotStart?: string;
  rebootWindow?: RebootWindow;
  /** Package name patterns the request keeps out of the apply (packages/exclude.ts). */
  exclude?: readonly string[];
  /** How many days a version must have been offered to be installed (0: no minimum). */
  minAge?: MinAge;
}

/**
 * System package updates: check and apply, one at a time in this agent, each apply recorded with who
 * asked and what changed; a requested reboot runs after the apply's delay (see `Reboots`).
 */
export class SystemService {
  private readonly lock: PackageLock;
  private readonly store: ApplyStore;
  private readonly lastChecks: LastCheckStore;
  private readonly candidates: CandidateStore;
  private readonly reboots: Reboots;
  private readonly runs: ApplyRun;
  private readonly guard: DiskGuard;
  private managerVersion: Promise<string | undefined> | undefined;

  constructor(private readonly o: SystemServiceOptions) {
    this.lock = new PackageLock(o.lockTimeoutMs);
    this.store = new ApplyStore(o.db, o.outbox, o.now);
    this.lastChecks = new LastCheckStore(o.db);
    this.candidates = new CandidateStore(o.db);
    this.reboots = new Reboots({
      db: o.db,
      store: this.store,
      manager: o.manager,
      command: o.rebootCommand,
      delayMs: o.rebootDelayMs,
      boot: o.boot,
      env: o.env,
      hooks: o.hooks,
      now: o.now,
      log: o.log,
    });
    this.runs = new ApplyRun({
      store: this.store,
      manager: o.manager,
      lock: this.lock,
      reboots: this.reboots,
      restarts: o.restarts,
      candidates: this.candidates,
      hooks: o.hooks,
      now: o.now,
      log: o.log,
    });
    this.guard = new DiskGuard({ manager: o.manager, minFreeMb: o.minFreeMb, log: o.log });
    // An apply still "running" in the database was cut short by a stop of the agent.
    for (const row of this.store.inStates(["queued", "downloading", "installing"])) {
      this.store.transition(row.id, "interrupted", {
        outcome: "interrupted",
        finished_at: this.store.isoNow(),
        error: { code: "interrupted", detail: "the agent stopped during the apply" },
      });
      o.log.warn({ apply_id: row.id }, `apply ${row.id} was interrupted by a stop of the agent`);
    }
  }

  /** Called once the agent is ready: records the boot it runs in (see `Reboots.recordBoot`). */
  start(): Promise<void> {
    return this.reboots.recordBoot();
  }

  /** The boot the agent runs in and the last reboot it noticed. */
  bootStatus(): BootStatus {
    return this.reboots.bootStatus();
  }

  /** Checks for updates; each update too young for `minAge` says when it is `eligible_at` (none with 0). */
  check(minAge?: MinAge): Promise<SystemStatus> {
    return this.measured("check", () => this.lock.run(() => this.checkNow(minAge)));
  }

  private async checkNow(minAge?: MinAge): Promise<SystemStatus> {
    const found = await this.o.manager.check();
    const rebootRequired = await this.o.manager.rebootRequired();
    const services = await this.servicesToRestart();
    const security = found.filter((u) => u.security).length;
    const checkedAt = new Date().toISOString();
    const firstSeen = this.candidates.seen(found, checkedAt);
    const now = this.o.now();
    const updates = found.map((u) => {
      const first_seen_at = firstSeen({ ...u, version: u.new_version });
      const eligible = minAge && eligibleAt(u, u.new_version, first_seen_at, minAge, now);
      // Too young for the minimum asked: an apply with it would defer the update (a held one stays held).
      const deferred = eligible ? { eligible_at: eligible, held_reason: u.held_reason ?? "deferred" } : {};
      return { ...u, first_seen_at, ...deferred };
    });
    const severityCounts = Object.fromEntries(SEVERITIES.map((s) => [s, 0])) as Record<Severity, number>;
    for (const u of updates) severityCounts[highestSeverity(u.advisories)]++;
    this.lastChecks.record({
      checked_at: checkedAt,
      package_manager: this.o.manager.name,
      security_updates: security,
      regular_updates: updates.length - security,
      reboot_required: rebootRequired,
    });
    return {
      packages: [...new Set(updates.map((u) => u.name))],
      security_updates: security,
      regular_updates: updates.length - security,
      updates_available: updates.length > 0,
      reboot_required: rebootRequired,
      services_restart_required: services,
      package_manager: this.o.manager.name,
      checked_at: checkedAt,
      severity_counts: severityCounts,
      updates,
    };
  }

  /** The services to restart now; null when not asked, or when finding them failed (logged: never fails a check). */
  private servicesToRestart(): Promise<ServiceToRestart[] | null> {
    return this.o.restarts.find().catch((err: unknown) => {
      this.o.log.warn({ err }, "the services to restart could not be listed");
      return null;
    });
  }

  /** The host's patch state: pending security updates and CVEs and their age, the last apply, the reboot. */
  compliance(): Compliance {
    return complianceOf(
      this.lastChecks.read(),
      this.candidates.all(),
      this.store.lastSucceededAt(),
      this.o.now(),
    );
  }

  /** The last check that succeeded, across restarts of the agent; null before the first. */
  lastCheck(): LastCheck | null {
    return this.lastChecks.read();
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

  /**
   * Applies updates and records the apply; a reboot it schedules starts its delay as it ends. The disk
   * guard comes first: when it refuses (`InsufficientStorageError`), nothing is recorded.
   */
  async apply(
    type: UpdateType,
    autoReboot: boolean,
    who: Requester,
    callbackUrl?: string,
    origin: ApplyOrigin = {},
  ): Promise<ApplyResult> {
    await this.guard.check("apply", type);
    const id = this.create(type, autoReboot, who, callbackUrl, origin);
    return this.measured("apply", () => this.runs.run(id));
  }

  /**
   * Starts an apply in the background and answers its status (`queued`) once it is recorded; `done` settles
   * when the package work is over (and a reboot it schedules has started its delay). Rejects, recording
   * nothing, when the disk guard refuses (`InsufficientStorageError`).
   */
  async startApply(
    type: UpdateType,
    autoReboot: boolean,
    who: Requester,
    callbackUrl?: string,
    origin: ApplyOrigin = {},
  ): Promise<{ status: ApplyStatus; done: Promise<void> }> {
    await this.guard.check("apply", type);
    const id = this.create(type, autoReboot, who, callbackUrl, origin);
    // Started on the next turn, so the answer shows the apply `queued`, as it was accepted.
    const job = setImmediate()
      .then(() => this.measured("apply", () => this.runs.run(id, origin.rebootWindow)))
      .then(
        () => undefined,
        () => {
          // Recorded in the apply's state and logged.
        },
      );
    return { status: this.status(id), done: job };
  }

  /** The status of apply `id` (any apply, synchronous ones included); `ApplyNotFoundError` when none. */
  status(id: number): ApplyStatus {
    return this.store.status(this.store.get(id), this.runs.progress(id));
  }

  /**
   * Downloads what an apply of `type` (with `selection`'s exclusions and minimum ages) would install,
   * without installing; one at a time with checks and applies. The disk guard comes first
   * (`InsufficientStorageError`).
   */
  async download(
    type: UpdateType,
    selection: Pick<ApplyOrigin, "exclude" | "minAge"> = {},
  ): Promise<DownloadResult> {
    await this.guard.check("download", type);
    const { exclude = [], minAge } = selection;
    const listener = sightings(this.candidates, minAge, this.o.now);
    return this.lock.run(async () => {
      const started = new Date();
      const r = await this.o.manager.download(type, listener, exclude);
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

  history(limit: number): ApplyRecord[] {
    return this.store.history(limit);
  }

  /**
   * Cancels a pending reboot (its apply is then `completed`, saying so) and waits (bounded) for a reboot
   * command already started. Async applies under way are left: the next start records them as interrupted.
   */
  async close(): Promise<void> {
    this.runs.close();
    this.o.hooks.close();
    await this.reboots.close();
  }

  private create(
    type: UpdateType,
    autoReboot: boolean,
    who: Requester,
    callbackUrl: string | undefined,
    origin: ApplyOrigin,
  ): number {
    return this.store.create({
      request_id: who.request_id,
      requested_by: JSON.stringify({ remote_address: who.remote_address, user_agent: who.user_agent }),
      update_type: type,
      auto_reboot: autoReboot,
      package_manager: this.o.manager.name,
      callback_url: callbackUrl ?? null,
      trigger: origin.trigger ?? "api",
      exclude: origin.exclude ?? [],
      min_age: origin.minAge ?? null,
      ...(origin.slotStart === undefined ? {} : { slot_start: origin.slotStart }),
    });
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
}
