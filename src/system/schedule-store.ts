import type { Static } from "@sinclair/typebox";
import type { Db } from "../store/db.js";
import type { SCHEDULE_RUN_STATES, ScheduleRequestSchema, ScheduleRunSchema } from "./schedule-schemas.js";

export type ScheduleRequest = Static<typeof ScheduleRequestSchema>;
export type ScheduleRun = Static<typeof ScheduleRunSchema>;
export type RunState = (typeof SCHEDULE_RUN_STATES)[number];

/** The schedule as stored: what was set, with its defaults filled in, and when. */
export interface StoredSchedule {
  schedule: Required<Omit<ScheduleRequest, "callback_url">> & { callback_url: string | null };
  /** When it was set (ms since the epoch): slots over before then are none of its business. */
  setAt: number;
}

interface RunRow {
  slot_start: string;
  state: RunState;
  apply_id: number | null;
  reason: string | null;
}

/** How many run records are kept: what GET shows, the newest. */
export const KEPT_RUNS = 50;

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * The schedule and the record of its slots' runs. A slot is known by its start (UTC), so a slot has at most
 * one record: inserting it is what claims the slot, before its apply starts.
 */
export class ScheduleStore {
  constructor(private readonly db: Db) {}

  read(): StoredSchedule | undefined {
    const row = this.db.prepare("SELECT schedule, set_at FROM system_schedule WHERE id = 1").get() as
      | { schedule: string; set_at: string }
      | undefined;
    if (row === undefined) return undefined;
    return {
      schedule: JSON.parse(row.schedule) as StoredSchedule["schedule"],
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

  /** Removes the schedule; the run records stay, so a slot they hold never runs again. False when none was set. */
  remove(): boolean {
    return this.db.prepare("DELETE FROM system_schedule WHERE id = 1").run().changes > 0;
  }

  /**
   * Records slot `start` in `state`; false (and nothing written) when the slot has a record already. Keeps
   * the newest `KEPT_RUNS` records, and those of the last two days.
   */
  claim(start: number, state: RunState, at: number, reason?: string): boolean {
    let inserted = false;
    this.db.transaction(() => {
      inserted =
        this.db
          .prepare(
            `INSERT INTO system_schedule_runs (slot_start, state, reason, recorded_at) VALUES (?, ?, ?, ?)
             ON CONFLICT (slot_start) DO NOTHING`,
          )
          .run(iso(start), state, reason ?? null, iso(at)).changes > 0;
      // A slot that may still be open keeps its record whatever its rank: the record is its claim.
      this.db
        .prepare(
          `DELETE FROM system_schedule_runs WHERE slot_start < ? AND slot_start NOT IN
             (SELECT slot_start FROM system_schedule_runs ORDER BY slot_start DESC LIMIT ?)`,
        )
        .run(iso(at - 2 * 86_400_000), KEPT_RUNS);
    })();
    return inserted;
  }

  /** Sets the state of slot `start`'s record, with its apply and reason when given. */
  update(start: number, fields: { state?: RunState; apply_id?: number; reason?: string | null }): void {
    this.db
      .prepare(
        `UPDATE system_schedule_runs SET state = COALESCE(@state, state), apply_id = COALESCE(@apply_id, apply_id),
           reason = CASE WHEN @has_reason THEN @reason ELSE reason END WHERE slot_start = @start`,
      )
      .run({
        start: iso(start),
        state: fields.state ?? null,
        apply_id: fields.apply_id ?? null,
        has_reason: fields.reason === undefined ? 0 : 1,
        reason: fields.reason ?? null,
      });
  }

  /** Whether slot `start` has a record. */
  has(start: number): boolean {
    return (
      this.db.prepare("SELECT 1 FROM system_schedule_runs WHERE slot_start = ?").get(iso(start)) !== undefined
    );
  }

  /** The start of the newest slot with a record (ms); undefined when there is none. */
  newestStart(): number | undefined {
    const row = this.db.prepare("SELECT max(slot_start) AS s FROM system_schedule_runs").get() as {
      s: string | null;
    };
    return row.s === null ? undefined : Date.parse(row.s);
  }

  /** The runs still `running`, with their applies. */
  unfinished(): { start: number; apply_id: number | null }[] {
    const rows = this.db
      .prepare("SELECT slot_start, apply_id FROM system_schedule_runs WHERE state = 'running'")
      .all() as { slot_start: string; apply_id: number | null }[];
    return rows.map((r) => ({ start: Date.parse(r.slot_start), apply_id: r.apply_id }));
  }

  /** The newest `KEPT_RUNS` records, newest first, as GET shows them. */
  runs(): ScheduleRun[] {
    const rows = this.db
      .prepare("SELECT * FROM system_schedule_runs ORDER BY slot_start DESC LIMIT ?")
      .all(KEPT_RUNS) as RunRow[];
    return rows.map((r) => ({
      slot_start: r.slot_start,
      state: r.state,
      ...(r.apply_id === null ? {} : { apply_id: r.apply_id }),
      ...(r.reason === null ? {} : { reason: r.reason }),
    }));
  }
}
