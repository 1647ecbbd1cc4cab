import type { Static } from "@sinclair/typebox";
import type { Logger } from "pino";
import { type InputIssue, InvalidInputError } from "../../util/invalid-input.js";
import { ScheduleNotFoundError } from "../errors.js";
import type { Scheduler } from "./scheduler.js";
import type { ScheduleSchema } from "./schemas.js";
import type { ScheduleRequest, ScheduleStore, StoredSchedule } from "./store.js";
import { isKnownTimeZone } from "./windows.js";

export type ScheduleView = Static<typeof ScheduleSchema>;

export interface ScheduleServiceOptions {
  /** The schedule and its runs, in the database. */
  store: ScheduleStore;
  /** What runs the slots, on the same store and clock. */
  scheduler: Scheduler;
  /** The clock the windows are read on; tests pass one they control. */
  now: () => number;
  log: Logger;
}

/** The checks of a schedule beyond its schema: a time zone Intl knows, delays no longer than any window. */
export function scheduleIssues(body: ScheduleRequest): InputIssue[] {
  const issues: InputIssue[] = [];
  if (!isKnownTimeZone(body.timezone))
    issues.push({
      field: "timezone",
      message: `is not a time zone this host knows: "${body.timezone}" (an IANA name such as Europe/Berlin or UTC)`,
    });
  const shortest = body.windows.reduce(
    (min, w, i) => (w.duration_minutes < min.minutes ? { minutes: w.duration_minutes, i } : min),
    { minutes: Number.POSITIVE_INFINITY, i: -1 },
  );
  for (const field of ["download_ahead_minutes", "random_delay_minutes"] as const) {
    const v = body[field];
    if (v !== undefined && v > shortest.minutes)
      issues.push({
        field,
        message: `must be at most the length of every window (windows[${shortest.i}] lasts ${shortest.minutes} minutes)`,
      });
  }
  return issues;
}

/**
 * The maintenance schedule: set, read and removed through the API, kept in the database, and run by the
 * `Scheduler` from the agent's start to its stop (both built by the composition, src/composition/areas.ts).
 */
export class ScheduleService {
  private readonly store: ScheduleStore;
  private readonly scheduler: Scheduler;

  constructor(private readonly o: ScheduleServiceOptions) {
    this.store = o.store;
    this.scheduler = o.scheduler;
  }

  /** Called once the agent is ready: a slot open now runs at once. */
  start(): void {
    this.scheduler.start();
  }

  close(): void {
    this.scheduler.close();
  }

  /** The schedule with its next run and its last runs; `ScheduleNotFoundError` when none is set. */
  get(): ScheduleView {
    const stored = this.store.read();
    if (stored === undefined) throw new ScheduleNotFoundError();
    return this.view(stored.schedule);
  }

  /** Sets (or replaces) the schedule; `InvalidInputError` naming each field a domain check refuses. */
  set(body: ScheduleRequest): ScheduleView {
    const issues = scheduleIssues(body);
    if (issues.length > 0) throw new InvalidInputError(issues);
    const schedule: StoredSchedule["schedule"] = {
      windows: body.windows,
      timezone: body.timezone,
      update_type: body.update_type,
      reboot: body.reboot,
      download_ahead_minutes: body.download_ahead_minutes ?? 0,
      random_delay_minutes: body.random_delay_minutes ?? 0,
      callback_url: body.callback_url ?? null,
      exclude: body.exclude ?? [],
      min_age_days: body.min_age_days ?? 0,
      security_min_age_days: body.security_min_age_days ?? 0,
    };
    this.store.write(schedule, this.o.now());
    this.o.log.info(
      { windows: schedule.windows.length, timezone: schedule.timezone, update_type: schedule.update_type },
      "the maintenance schedule was set",
    );
    this.scheduler.changed();
    return this.view(schedule);
  }

  /** Removes the schedule (its run records stay); `ScheduleNotFoundError` when none is set. */
  remove(): void {
    if (!this.store.remove()) throw new ScheduleNotFoundError();
    this.o.log.info("the maintenance schedule was removed");
    this.scheduler.changed();
  }

  private view(schedule: StoredSchedule["schedule"]): ScheduleView {
    const next = this.scheduler.nextRunAt(schedule);
    return {
      ...schedule,
      // Every window names a day, so a slot always comes within a week.
      next_run_at: new Date(next ?? this.o.now()).toISOString(),
      runs: this.store.runs(),
    };
  }
}
