import type { Logger } from "pino";
import {
  type ApplyRow,
  type ApplyStore,
  hooksOf,
  NO_PROGRESS,
  nextProgress,
  type Progress,
  type StoredResult,
} from "./applies.js";
import { type CandidateStore, type MinAge, sightings } from "./candidates.js";
import { ApplyFailedError, HookFailedError, isSystemError } from "./errors.js";
import {
  type HookContext,
  type HookRecord,
  type Hooks,
  hookFailure,
  linesOfChanges,
  linesOfUpdates,
  type PackageLine,
} from "./hooks/hooks.js";
import type { PackageLock } from "./mutex.js";
import type { ApplyListener, ApplyProgress, PackageManager } from "./packages/package-manager.js";
import type { Reboots } from "./restarts/reboot.js";
import type { ServiceToRestart } from "./restarts/restart-scan.js";
import type { RestartFinder } from "./restarts/services-restart.js";
import type { ApplyResult, ApplyStatus } from "./schemas.js";

export interface ApplyRunOptions {
  store: ApplyStore;
  manager: PackageManager;
  lock: PackageLock;
  reboots: Reboots;
  restarts: Pick<RestartFinder, "find">;
  /**
   * The candidates' first sightings: the apply's own check records them, as a check does (so that a version
   * first offered at an apply ages from then); what an apply installed is no longer pending.
   */
  candidates: Pick<CandidateStore, "installed" | "firstSeen" | "seen">;
  /** The host's hooks, run before and after the package manager changes packages. */
  hooks: Pick<Hooks, "run">;
  /** The clock of the applies' times and of their windows' ends. */
  now: () => number;
  log: Logger;
}

type ApplyError = ApplyStatus["error"];
/** What an apply that ran to its end records and answers. */
type Installed = StoredResult & { services_restart_required: ServiceToRestart[] | null };
/** What an apply records beside its result: whether its window left out the reboot its policy asked for. */
type WindowNote = { reboot_left_out?: number };

/**
 * The reboot a scheduled apply may end with: when one is required, or `always`; either only when the reboot
 * command would run before `by` (the end of the apply's window, ms since the epoch on the agent's clock).
 */
export interface RebootWindow {
  always: boolean;
  by: number;
}

/** What the client sees of an error that is not the system area's own; its message stays in the log. */
const UNEXPECTED: ApplyError = {
  code: "internal_error",
  detail: "the agent failed unexpectedly; see its log",
};

/**
 * Runs applies recorded `queued` to their end: holding the agent's package lock, the package manager's
 * recovery, the upgrade and the reboot question; then the apply's last state, its one log line, and the
 * reboot it schedules. Progress is kept in memory while an apply runs and recorded with its states.
 */
export class ApplyRun {
  /** Progress of the applies under way (persisted at each state change). */
  private readonly live = new Map<number, Progress>();
  /** The applies past their pre-apply hooks, with the packages they set out to change. */
  private readonly upgrading = new Map<number, PackageLine[]>();
  private closed = false;

  constructor(private readonly o: ApplyRunOptions) {}

  /** Progress of apply `id` while it runs; undefined once it is over. */
  progress(id: number): Progress | undefined {
    return this.live.get(id);
  }

  /**
   * Runs apply `id` (recorded `queued`) and records how it ended. A failure of the package manager is
   * thrown as an `ApplyFailedError` carrying the apply's id. After `close`, an apply that fails is left
   * as it is: the next start records it as interrupted. With `window`, its reboot follows that rule instead
   * of `auto_reboot`'s.
   */
  async run(id: number, window?: RebootWindow): Promise<ApplyResult> {
    const row = this.o.store.get(id);
    try {
      const installed = await this.o.lock.run(() => this.install(row));
      await this.postApply(row, installed);
      this.o.candidates.installed(installed.upgraded);
      const { result, note } =
        window === undefined ? { result: installed, note: {} } : this.rebootInWindow(row, installed, window);
      return {
        id,
        update_type: row.update_type,
        package_manager: this.o.manager.name,
        ...result,
        hooks: hooksOf(this.o.store.get(id)),
        started_at: new Date(row.started_at).toISOString(),
        ...this.finish(row, "succeeded", null, result, note),
      };
    } catch (err) {
      if (this.closed) throw err;
      await this.postApply(row, null);
      if (!isSystemError(err)) {
        this.finish(row, "failed", UNEXPECTED, null);
        throw err;
      }
      this.finish(row, "failed", { code: err.code, detail: err.message }, null);
      throw new ApplyFailedError(id, err);
    }
  }

  private rebootInWindow(
    row: ApplyRow,
    installed: Installed,
    window: RebootWindow,
  ): { result: Installed; note: WindowNote } {
    const wanted = (window.always || installed.reboot_required) && !this.closed;
    const inTime = this.o.reboots.dueBefore(window.by);
    const leftOut = wanted && !inTime;
    if (leftOut)
      this.o.log.warn(
        { apply_id: row.id, window_end: new Date(window.by).toISOString() },
        `apply ${row.id}: no reboot, as it would come after the end of the maintenance window`,
      );
    return {
      result: { ...installed, reboot_scheduled: wanted && inTime },
      note: leftOut ? { reboot_left_out: 1 } : {},
    };
  }

  /** Stops recording progress; applies still under way are left to the next start. */
  close(): void {
    this.closed = true;
  }

  private async install(row: ApplyRow): Promise<Installed> {
    const id = row.id;
    this.o.store.transition(id, "downloading");
    this.live.set(id, NO_PROGRESS);
    const recovery = await this.o.manager.recover(this.o.store.previousInterrupted(id));
    if (recovery) {
      this.o.store.update(id, { recovery });
      this.o.log.warn({ apply_id: id, recovery }, `apply ${id}: ${recovery.detail}`);
    }
    const exclude = row.exclude === null ? [] : (JSON.parse(row.exclude) as string[]);
    const minAge = row.min_age === null ? undefined : (JSON.parse(row.min_age) as MinAge);
    const listener: ApplyListener = {
      planned: (updates) => this.o.store.update(id, { planned: updates }),
      progress: (p) => this.onProgress(id, p),
      ...sightings(this.o.candidates, minAge, this.o.now),
      beforeUpgrade: (updates) => this.preApply(row, linesOfUpdates(updates)),
    };
    const changes = await this.o.manager.apply(row.update_type, listener, exclude);
    const rebootRequired = await this.o.manager.rebootRequired();
    // The packages are installed by now: a failure to list services must not turn the apply into a failure.
    const services = await this.o.restarts.find().catch((err: unknown) => {
      this.o.log.warn({ err }, "the services to restart could not be listed");
      return null;
    });
    return {
      ...changes,
      reboot_required: rebootRequired,
      services_restart_required: services,
      reboot_scheduled: row.auto_reboot === 1 && rebootRequired && !this.closed,
    };
  }

  /** Runs the pre-apply hooks; the first that does not succeed refuses the apply (`HookFailedError`). */
  private async preApply(row: ApplyRow, packages: PackageLine[]): Promise<void> {
    const records = await this.hooks(row, "pre-apply", { ...this.context(row), packages });
    const failed = records.find((r) => r.outcome !== "succeeded");
    if (failed !== undefined) throw new HookFailedError(hookFailure(failed), failed);
    this.upgrading.set(row.id, packages);
  }

  /**
   * After an apply that got past its pre-apply hooks, however it ended: the post-apply hooks, told what it
   * changed (`installed`), or what it set out to change when it failed. Their failures are only recorded.
   */
  private async postApply(row: ApplyRow, installed: Installed | null): Promise<void> {
    const planned = this.upgrading.get(row.id);
    this.upgrading.delete(row.id);
    if (planned === undefined || this.closed) return;
    const packages = installed === null ? planned : linesOfChanges(installed);
    const outcome = installed === null ? "failed" : "succeeded";
    await this.hooks(row, "post-apply", { ...this.context(row), packages, outcome }).catch((err: unknown) =>
      this.o.log.error({ err, apply_id: row.id }, `apply ${row.id}: the post-apply hooks could not be run`),
    );
  }

  /** Runs a stage's hooks and records them with the apply's earlier ones. */
  private async hooks(row: ApplyRow, stage: HookRecord["stage"], ctx: HookContext): Promise<HookRecord[]> {
    const records = await this.o.hooks.run(stage, ctx);
    if (records.length > 0) this.o.store.addHooks(row.id, records);
    return records;
  }

  private context(row: ApplyRow): Omit<HookContext, "packages"> {
    return { applyId: row.id, updateType: row.update_type, trigger: row.trigger };
  }

  /** Called from the package manager's output stream: it must not throw (the database may be closed by now). */
  private onProgress(id: number, report: ApplyProgress): void {
    const before = this.live.get(id) ?? NO_PROGRESS;
    const progress = nextProgress(before, report);
    this.live.set(id, progress);
    if (report.phase !== "installing" || before.install !== null || this.closed) return;
    try {
      this.o.store.transition(id, "installing", { progress });
    } catch (err) {
      this.o.log.error({ err, apply_id: id }, "the apply's state could not be recorded");
    }
  }

  /**
   * Records the apply's last state (`reboot_scheduled` when its result schedules a reboot), logs it, and
   * starts the reboot's delay: the state is recorded before the reboot can run.
   */
  private finish(
    row: ApplyRow,
    outcome: "succeeded" | "failed",
    error: ApplyError,
    result: StoredResult | null,
    note: WindowNote = {},
  ): { finished_at: string; duration_ms: number; reboot_at: string | null } {
    const finished = new Date(this.o.now());
    const ms = finished.getTime() - new Date(row.started_at).getTime();
    const progress = this.live.get(row.id);
    this.live.delete(row.id);
    const reboot = result?.reboot_scheduled ? this.o.reboots.plan() : null;
    this.o.store.transition(
      row.id,
      outcome === "failed" ? "failed" : reboot ? "reboot_scheduled" : "completed",
      {
        outcome,
        finished_at: finished.toISOString(),
        duration_ms: ms,
        error,
        ...(result === null ? {} : { result }),
        // Nothing is being worked on once the apply is over.
        ...(progress === undefined ? {} : { progress: { ...progress, current: null } }),
        ...reboot,
        ...note,
      },
    );
    this.logEnd(row, outcome, error, result, ms);
    if (reboot) this.o.reboots.schedule(row.id);
    return { finished_at: finished.toISOString(), duration_ms: ms, reboot_at: reboot?.reboot_at ?? null };
  }

  /** The one line an apply leaves in the log: what was asked, how it ended, what it changed. */
  private logEnd(
    row: ApplyRow,
    outcome: "succeeded" | "failed",
    error: ApplyError,
    result: StoredResult | null,
    ms: number,
  ): void {
    const type = row.update_type;
    const fields = {
      apply_id: row.id,
      update_type: type,
      auto_reboot: row.auto_reboot === 1,
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
  }
}
