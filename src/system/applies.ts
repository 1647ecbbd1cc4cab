import type { Outbox } from "../events/outbox.js";
import type { Db } from "../store/db.js";
import type { MinAge } from "./candidates.js";
import { ApplyNotFoundError } from "./errors.js";
import type { HookRecord } from "./hooks/hooks.js";
import type { ApplyChanges, ApplyProgress, PackageUpdate, Recovery } from "./packages/package-manager.js";
import type { ServiceToRestart } from "./restarts/restart-scan.js";
import type { ApplyRecord, ApplyState, ApplyStatus, RebootReport } from "./schemas.js";

export interface ApplyRow {
  id: number;
  request_id: string;
  requested_by: string;
  update_type: "security" | "full";
  auto_reboot: number;
  package_manager: ApplyStatus["package_manager"];
  started_at: string;
  finished_at: string | null;
  duration_ms: number | null;
  outcome: "running" | "succeeded" | "failed" | "interrupted";
  error: string | null;
  result: string | null;
  state: ApplyState;
  callback_url: string | null;
  progress: string | null;
  planned: string | null;
  recovery: string | null;
  reboot: string | null;
  reboot_at: string | null;
  updated_at: string | null;
  trigger: ApplyTrigger;
  /** The package name patterns the apply keeps out, as JSON; null for none. */
  exclude: string | null;
  /** The minimum ages of the versions it installs (`MinAge`), as JSON; null for none. */
  min_age: string | null;
  /** The maintenance window's slot a scheduled apply ran for (its start, UTC): the apply is the slot's run. */
  slot_start: string | null;
  /** 1 when the window left out the reboot its policy asked for (it would have come after the window's end). */
  reboot_left_out: number;
  /** The host's hooks the apply ran (`HookRecord[]`), as JSON; null before any. */
  hooks: string | null;
}

/** What started an apply: a request to the API, or a maintenance window's slot. */
export type ApplyTrigger = "api" | "schedule";

export type StoredResult = ApplyChanges & {
  reboot_required: boolean;
  reboot_scheduled: boolean;
  /** Results stored before the agent's own scan hold unit names (what needrestart listed). */
  services_restart_required?: ServiceToRestart[] | string[] | null;
};
export type Progress = ApplyStatus["progress"];

const json = <T>(text: string | null): T | null => (text === null ? null : (JSON.parse(text) as T));

/** Services to restart as stored: a unit name of an older result becomes a unit without known processes. */
function servicesOf(stored: StoredResult["services_restart_required"]): ServiceToRestart[] | null {
  if (stored === undefined || stored === null) return null;
  return stored.map((s) => (typeof s === "string" ? { unit: s, pids: [], files: [] } : s));
}

/** The host's hooks apply `row` ran, in order; none before any ran. */
export const hooksOf = (row: ApplyRow): HookRecord[] => json<HookRecord[]>(row.hooks) ?? [];

/** An apply's package lists and reboot flags from its stored result; empty until it is over. */
export function changesOf(stored: string | null) {
  const result = json<StoredResult>(stored);
  return {
    upgraded: result?.upgraded ?? [],
    installed: result?.installed ?? [],
    removed: result?.removed ?? [],
    held_back: result?.held_back ?? [],
    reboot_required: result?.reboot_required ?? null,
    services_restart_required: servicesOf(result?.services_restart_required),
    reboot_scheduled: result?.reboot_scheduled ?? false,
  };
}

export const applyPath = (id: number) => `/v1/system/applies/${id}`;

/** A reboot report before anything happened to the reboot: the boot and kernel it is to leave. */
export function newRebootReport(before: { boot_id: string | null; kernel: string | null }): RebootReport {
  return {
    boot_id_before: before.boot_id,
    kernel_before: before.kernel,
    command_started_at: null,
    boot_id_after: null,
    kernel_after: null,
    back_online_at: null,
    reboot_required_after: null,
    error: null,
  };
}

/** The reboot report of an apply; an apply without one (no reboot was scheduled) reads as an empty one. */
export function rebootReportOf(row: ApplyRow): RebootReport {
  return json<RebootReport>(row.reboot) ?? newRebootReport({ boot_id: null, kernel: null });
}

/** Fields a transition may set with the state. */
export interface ApplyFields {
  outcome?: ApplyRow["outcome"];
  finished_at?: string;
  duration_ms?: number;
  error?: { code: string; detail: string } | null;
  result?: StoredResult;
  progress?: Progress;
  reboot?: RebootReport;
  reboot_at?: string | null;
  reboot_left_out?: number;
}

/**
 * The applies' persistent state: each state change is one transaction that records it in the apply's history
 * and, when the apply has a callback, writes its `system_update` event into the outbox (one ordering key per
 * apply, so its events arrive in order).
 */
export class ApplyStore {
  private readonly insertStmt;
  private readonly byIdStmt;
  private readonly latestStmt;
  private readonly lastSucceededStmt;
  private readonly statesStmt;
  private readonly addStateStmt;
  private readonly releaseClaimStmt;

  constructor(
    private readonly db: Db,
    private readonly outbox: Outbox,
    /** The clock of the applies' times (ms since the epoch). */
    private readonly now: () => number,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO system_applies (request_id, requested_by, update_type, auto_reboot, package_manager, started_at,
         outcome, state, callback_url, updated_at, trigger, slot_start, exclude, min_age)
       VALUES (@request_id, @requested_by, @update_type, @auto_reboot, @package_manager, @at, 'running', 'queued',
         @callback_url, @at, @trigger, @slot_start, @exclude, @min_age)`,
    );
    // A slot's claim, written before its apply, gives way to the apply: from then on the apply is its run.
    this.releaseClaimStmt = db.prepare("DELETE FROM system_schedule_slots WHERE slot_start = ?");
    this.byIdStmt = db.prepare("SELECT * FROM system_applies WHERE id = ?");
    this.latestStmt = db.prepare("SELECT * FROM system_applies ORDER BY id DESC LIMIT ?");
    this.lastSucceededStmt = db.prepare(
      "SELECT MAX(finished_at) AS at FROM system_applies WHERE outcome = 'succeeded'",
    );
    this.statesStmt = db.prepare("SELECT state, at FROM system_apply_states WHERE apply_id = ? ORDER BY seq");
    this.addStateStmt = db.prepare(
      `INSERT INTO system_apply_states (apply_id, seq, state, at)
       VALUES (?, (SELECT count(*) FROM system_apply_states WHERE apply_id = ?), ?, ?)`,
    );
  }

  /** Records a new apply in state `queued`, with its event; a scheduled one takes over its slot's claim. */
  create(a: {
    request_id: string;
    requested_by: string;
    update_type: "security" | "full";
    auto_reboot: boolean;
    package_manager: string;
    callback_url: string | null;
    trigger: ApplyTrigger;
    slot_start?: string;
    exclude: readonly string[];
    min_age: MinAge | null;
  }): number {
    let id = 0;
    const at = this.isoNow();
    const slot_start = a.slot_start ?? null;
    this.db.transaction(() => {
      id = Number(
        this.insertStmt.run({
          ...a,
          at,
          slot_start,
          auto_reboot: a.auto_reboot ? 1 : 0,
          exclude: a.exclude.length === 0 ? null : JSON.stringify(a.exclude),
          min_age:
            a.min_age === null || (a.min_age.regularDays === 0 && a.min_age.securityDays === 0)
              ? null
              : JSON.stringify(a.min_age),
        }).lastInsertRowid,
      );
      if (slot_start !== null) this.releaseClaimStmt.run(slot_start);
      this.recordState(id, "queued", at);
    })();
    this.outbox.kick();
    return id;
  }

  /** Apply `id`; undefined when there is none. */
  find(id: number): ApplyRow | undefined {
    return this.byIdStmt.get(id) as ApplyRow | undefined;
  }

  /** Apply `id`; throws `ApplyNotFoundError` when there is none. */
  get(id: number): ApplyRow {
    const row = this.find(id);
    if (row === undefined) throw new ApplyNotFoundError(id);
    return row;
  }

  /** Moves an apply to `state`, setting `fields` with it; its history entry and event in the same transaction. */
  transition(id: number, state: ApplyState, fields: ApplyFields = {}): ApplyRow {
    const now = this.isoNow();
    const values: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(fields))
      values[k] = v === undefined || v === null || typeof v !== "object" ? (v ?? null) : JSON.stringify(v);
    const sets = Object.keys(values).map((k) => `${k} = @${k}`);
    this.db.transaction(() => {
      this.db
        .prepare(
          `UPDATE system_applies SET ${[...sets, "state = @state", "updated_at = @now"].join(", ")} WHERE id = @id`,
        )
        .run({ ...values, id, state, now });
      this.recordState(id, state, now);
    })();
    this.outbox.kick();
    return this.get(id);
  }

  /** Moves apply `row`, whose reboot was scheduled, to `state`, with `report` over its reboot report. */
  transitionReboot(row: ApplyRow, state: ApplyState, report: Partial<RebootReport>): void {
    this.transition(row.id, state, { reboot: { ...rebootReportOf(row), ...report } });
  }

  /** Sets fields without a change of state (no event): the plan, the recovery, the progress, the hooks. */
  update(
    id: number,
    fields: { planned?: PackageUpdate[]; recovery?: Recovery; progress?: Progress; hooks?: HookRecord[] },
  ): void {
    const sets = Object.keys(fields).map((k) => `${k} = @${k}`);
    const values = Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, JSON.stringify(v)]));
    this.db
      .prepare(`UPDATE system_applies SET ${sets.join(", ")}, updated_at = @now WHERE id = @id`)
      .run({ ...values, id, now: this.isoNow() });
  }

  /** Adds `records` after the hooks apply `id` ran so far (no event). */
  addHooks(id: number, records: readonly HookRecord[]): void {
    this.db.transaction(() => this.update(id, { hooks: [...hooksOf(this.get(id)), ...records] }))();
  }

  /** Sends the apply's event again without a change of state: what changed since is in it (its post-reboot hooks). */
  announce(id: number): void {
    this.enqueueEvent(id);
    this.outbox.kick();
  }

  /** Now on the applies' clock, as they record it. */
  isoNow(): string {
    return new Date(this.now()).toISOString();
  }

  /** Applies in one of `states`, oldest first. */
  inStates(states: readonly ApplyState[]): ApplyRow[] {
    return this.db
      .prepare(`SELECT * FROM system_applies WHERE state IN (SELECT value FROM json_each(?)) ORDER BY id`)
      .all(JSON.stringify(states)) as ApplyRow[];
  }

  /** Whether the apply before `id` was cut short by a stop of the agent. */
  previousInterrupted(id: number): boolean {
    const row = this.db
      .prepare("SELECT outcome FROM system_applies WHERE id < ? ORDER BY id DESC LIMIT 1")
      .get(id) as { outcome: string } | undefined;
    return row?.outcome === "interrupted";
  }

  status(row: ApplyRow, liveProgress?: Progress): ApplyStatus {
    const planned = json<PackageUpdate[]>(row.planned) ?? [];
    return {
      id: row.id,
      state: row.state,
      trigger: row.trigger,
      update_type: row.update_type,
      auto_reboot: row.auto_reboot === 1,
      package_manager: row.package_manager,
      callback_url: row.callback_url,
      // Progress recorded before `current` existed has none.
      progress: { ...NO_PROGRESS, ...(liveProgress ?? json<Progress>(row.progress)) },
      planned: planned.map((u) => ({
        name: u.name,
        arch: u.arch,
        current_version: u.current_version,
        new_version:
          row.update_type === "security" && u.security_version ? u.security_version : u.new_version,
        held: u.held,
      })),
      ...changesOf(row.result),
      reboot_at: row.reboot_at,
      reboot: json<RebootReport>(row.reboot),
      recovery: json<Recovery>(row.recovery),
      hooks: hooksOf(row),
      error: json<{ code: string; detail: string }>(row.error),
      history: this.statesStmt.all(row.id) as ApplyStatus["history"],
      started_at: row.started_at,
      updated_at: row.updated_at ?? row.started_at,
      finished_at: row.finished_at,
      duration_ms: row.duration_ms,
      links: { status: applyPath(row.id) },
    };
  }

  /** When the last apply that succeeded finished; null when none has. */
  lastSucceededAt(): string | null {
    return (this.lastSucceededStmt.get() as { at: string | null }).at;
  }

  /** The latest `limit` applies, newest first, as the apply history shows them. */
  history(limit: number): ApplyRecord[] {
    return (this.latestStmt.all(limit) as ApplyRow[]).map((r) => ({
      id: r.id,
      state: r.state,
      trigger: r.trigger,
      request_id: r.request_id,
      requested_by: JSON.parse(r.requested_by) as ApplyRecord["requested_by"],
      update_type: r.update_type,
      auto_reboot: r.auto_reboot === 1,
      package_manager: r.package_manager,
      started_at: r.started_at,
      finished_at: r.finished_at,
      duration_ms: r.duration_ms,
      outcome: r.outcome,
      error: json<ApplyRecord["error"]>(r.error),
      ...changesOf(r.result),
    }));
  }

  private recordState(id: number, state: ApplyState, at: string): void {
    this.addStateStmt.run(id, id, state, at);
    this.enqueueEvent(id);
  }

  /** The apply's `system_update` event, as it is now, into the outbox when it has a callback. */
  private enqueueEvent(id: number): void {
    const row = this.get(id);
    if (row.callback_url === null) return;
    this.outbox.add({
      type: "system_update",
      url: row.callback_url,
      data: this.status(row),
      orderingKey: `system_update:${id}`,
    });
  }
}

/** Progress as the status shows it, updated from an adapter's report. */
export function nextProgress(p: Progress, report: ApplyProgress): Progress {
  const count = { done: report.done, total: report.total };
  const current = report.current ?? null;
  if (report.phase === "downloading") return { ...p, download: count, current };
  // Installing starts when downloading is over: what was to download is downloaded (none: nothing was).
  const download = p.download ? { done: p.download.total, total: p.download.total } : { done: 0, total: 0 };
  return { download, install: count, current };
}

/** Progress before the package manager reported any. */
export const NO_PROGRESS: Progress = { download: null, install: null, current: null };
