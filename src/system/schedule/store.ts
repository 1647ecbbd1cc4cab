import type { Static } from "@sinclair/typebox";
import type { Db } from "../../store/db.js";
import type { ApplyState } from "../schemas.js";
import type { SCHEDULE_RUN_STATES, ScheduleRequestSchema, ScheduleRunSchema } from "./schemas.js";

export type ScheduleRequest = Static<typeof ScheduleRequestSchema>;
export type ScheduleRun = Static<typeof ScheduleRunSchema>;
export type RunState = (typeof SCHEDULE_RUN_STATES)[number];

/** The schedule as stored: what was set, with its defaults filled in, and when. */
export interface StoredSchedule {
  schedule: Required<Omit<ScheduleRequest, "callback_url">> & { callback_url: string | null };
  /** When it was set (ms since the epoch): slots over before then are none of its business. */
  setAt: number;
}

/** A run as stored: a slot without an apply has its own state and reason; a slot with one, its apply's. */
interface RunRow {
  slot_start: string;
  state: RunState | null;
  reason: string | null;
  apply_id: number | null;
  apply_state: ApplyState | null;
  error: string | null;
  /** 1 when the apply left `queued` for anything but `failed`: it got the package manager. */
  started: number;
  reboot_left_out: number;
}

/** How many run records are kept: what GET shows, the newest. */
export const KEPT_RUNS = 50;

/** The reason of a run the agent's stop cut short. */
export const INTERRUPTED = "the agent stopped during the run; a slot never runs twice";
/** The reason of a completed run whose window left out the reboot its policy asked for. */
export const NO_REBOOT = "no reboot: it would have come after the end of the window";

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * A slot's run as its apply tells it: under way while the apply is; how it ended once it has. An apply that
 * failed without getting the package manager (it never left `queued`, or the package manager stayed busy)
 * changed nothing: its run was refused.
 */
function runOfApply(row: RunRow & { apply_id: number }): ScheduleRun {
  const run = (state: RunState, reason?: string | null): ScheduleRun => ({
    slot_start: row.slot_start,
    state,
    apply_id: row.apply_id,
    ...(reason == null ? {} : { reason }),
  });
  switch (row.apply_state) {
    case "queued":
    case "downloading":
    case "installing":
      return run("running");
    case "interrupted":
      return run("interrupted", INTERRUPTED);
    case "failed": {
      const error =
        row.error === null ? null : (JSON.parse(row.error) as { code: string; detail: string } | null);
      // Nothing changed: the apply never got the package manager, or a pre-apply hook refused it.
      const refused =
        row.started === 0 || error?.code === "package_manager_busy" || error?.code === "hook_failed";
      return run(refused ? "refused" : "failed", error?.detail);
    }
    default:
      return run("completed", row.reboot_left_out === 1 ? NO_REBOOT : undefined);
  }
}

/** Every slot's start with a record: the slots' own rows and the applies of slots. */
const SLOTS = `SELECT slot_start FROM system_schedule_slots
  UNION ALL SELECT slot_start FROM system_applies WHERE slot_start IS NOT NULL`;

/**
 * The schedule and its slots' runs. A slot is known by its start (UTC) and has at most one record: a claim
 * written before its apply starts (which the apply takes over as it is recorded: the run is then a view of
 * its apply), or the row of a slot that never got an apply (missed, refused, interrupted before it).
 */
export class ScheduleStore {
  constructor(private readonly db: Db) {}

  read(): StoredSchedule | undefined {
    const row = this.db.prepare("SELECT schedule, set_at FROM system_schedule WHERE id = 1").get() as
      | { schedule: string; set_at: string }
      | undefined;
    if (row === undefined) return undefined;
    return {
      schedule: withDefaults(JSON.parse(row.schedule) as Partial<StoredSchedule["schedule"]>),
      setAt: Date.parse(row.set_at),
    };
  }

  write(schedule: StoredSchedule["schedule"], at: number): void {
    this.db
      .prepare(
        `INSERT INTO system_schedule (id, schedule, set_at) VALUES (1, @schedule, @at)
         ON CONFLICT (id) DO UPDATE SET schedule = excluded.schedule, set_at = excluded.set_at`,
      )
      .run({ schedule: JSON.stringify(schedule), at: iso(at) });
  }

  /** Removes the schedule; the runs stay, so a slot they hold never runs again. False when none was set. */
  remove(): boolean {
    return this.db.prepare("DELETE FROM system_schedule WHERE id = 1").run().changes > 0;
  }

  /**
   * Records slot `start` in `state` (`running`: claimed, its apply to come); false (and nothing written)
   * when the slot has a record already. Keeps the newest `KEPT_RUNS` records, and those of the last two
   * days (applies are never removed: they are the apply history too).
   */
  claim(start: number, state: RunState, at: number, reason?: string): boolean {
    let inserted = false;
    this.db.transaction(() => {
      if (this.has(start)) return;
      this.db
        .prepare(
          "INSERT INTO system_schedule_slots (slot_start, state, reason, recorded_at) VALUES (?, ?, ?, ?)",
        )
        .run(iso(start), state, reason ?? null, iso(at));
      inserted = true;
      // A slot that may still be open keeps its record whatever its rank: the record is its claim.
      this.db
        .prepare(
          `DELETE FROM system_schedule_slots WHERE slot_start < ? AND slot_start NOT IN
             (SELECT slot_start FROM (${SLOTS}) ORDER BY slot_start DESC LIMIT ?)`,
        )
        .run(iso(at - 2 * 86_400_000), KEPT_RUNS);
    })();
    return inserted;
  }

  /** Sets the state and reason of slot `start`, which has no apply (a claim its apply never took over). */
  update(start: number, state: RunState, reason: string): void {
    this.db
      .prepare("UPDATE system_schedule_slots SET state = ?, reason = ? WHERE slot_start = ?")
      .run(state, reason, iso(start));
  }

  /** Whether slot `start` has a record. */
  has(start: number): boolean {
    return this.db.prepare(`SELECT 1 FROM (${SLOTS}) WHERE slot_start = ?`).get(iso(start)) !== undefined;
  }

  /** The start of the newest slot with a record (ms); undefined when there is none. */
  newestStart(): number | undefined {
    const row = this.db.prepare(`SELECT max(slot_start) AS s FROM (${SLOTS})`).get() as { s: string | null };
    return row.s === null ? undefined : Date.parse(row.s);
  }

  /** The slots claimed whose apply was never recorded (ms). */
  claimsWithoutApply(): number[] {
    const rows = this.db
      .prepare("SELECT slot_start FROM system_schedule_slots WHERE state = 'running'")
      .all() as { slot_start: string }[];
    return rows.map((r) => Date.parse(r.slot_start));
  }

  /** The newest `KEPT_RUNS` runs, newest first, as GET shows them. */
  runs(): ScheduleRun[] {
    const rows = this.db
      .prepare(
        `SELECT slot_start, state, reason, NULL AS apply_id, NULL AS apply_state, NULL AS error, 0 AS started,
           0 AS reboot_left_out
         FROM system_schedule_slots
         UNION ALL
         SELECT a.slot_start, NULL, NULL, a.id, a.state, a.error,
           EXISTS (SELECT 1 FROM system_apply_states h WHERE h.apply_id = a.id AND h.state NOT IN ('queued', 'failed')),
           a.reboot_left_out
         FROM system_applies a WHERE a.slot_start IS NOT NULL
         ORDER BY slot_start DESC LIMIT ?`,
      )
      .all(KEPT_RUNS) as RunRow[];
    return rows.map((r) =>
      r.apply_id !== null
        ? runOfApply({ ...r, apply_id: r.apply_id })
        : {
            slot_start: r.slot_start,
            state: r.state ?? "running",
            ...(r.reason === null ? {} : { reason: r.reason }),
          },
    );
  }
}

/** A schedule as stored, with the defaults of fields added since it was set: nothing kept out, no minimum age. */
const withDefaults = (s: Partial<StoredSchedule["schedule"]>): StoredSchedule["schedule"] =>
  ({
    ...s,
    exclude: s.exclude ?? [],
    min_age_days: s.min_age_days ?? 0,
    security_min_age_days: s.security_min_age_days ?? 0,
  }) as StoredSchedule["schedule"];
