import type { Logger } from "pino";
import { Periodic } from "../../util/periodic.js";
import { minAgeOf } from "../candidates.js";
import type { SystemService } from "../service.js";
import { INTERRUPTED, KEPT_RUNS, type ScheduleStore, type StoredSchedule } from "./store.js";
import { runTime, type Slot, slotsBetween } from "./windows.js";

export interface SchedulerOptions {
  store: ScheduleStore;
  system: Pick<SystemService, "startApply" | "download">;
  /** The clock the windows are read on (ms since the epoch). */
  now: () => number;
  /** A number in [0, 1) for each slot's random delay. */
  random: () => number;
  log: Logger;
}

type Schedule = StoredSchedule["schedule"];

const MINUTE = 60_000;
const DAY = 86_400_000;
/** The longest sleep between two looks at the schedule: the wall clock may be set meanwhile. */
const MAX_SLEEP_MS = 10 * MINUTE;
/** How far back slots missed while the agent was down are recorded. */
const LOOKBACK_MS = 366 * DAY;

const MISSED = "the agent was not running while the window was open";
const iso = (ms: number) => new Date(ms).toISOString();

/**
 * Runs the schedule's slots, each at most once: a slot is claimed (`running`) before its apply is asked
 * for, and its apply, once recorded, carries the slot and is its run from then on; so an agent stopped
 * during the run finds it at its next start (the apply interrupted, or the claim without one) instead of
 * running it again. A slot still open at a look that has no record runs (after its random delay); one that
 * closed without a record while the agent was down is recorded `missed`. Every time is the agent's clock.
 */
export class Scheduler {
  /** The looks at the schedule: each answers when the next is due. */
  private readonly looks: Periodic;
  /** When each slot planned so far runs (its start plus the random delay drawn for it), by slot start. */
  private readonly runTimes = new Map<number, number>();
  /** Slots whose download ahead was started by this process. */
  private readonly downloads = new Set<number>();

  constructor(private readonly o: SchedulerOptions) {
    this.looks = new Periodic({
      intervalMs: MAX_SLEEP_MS,
      round: () => this.lookSafely(),
      what: "looking at the maintenance schedule",
      log: o.log,
    });
    // A claim without its apply belongs to an earlier process that stopped before the apply was recorded.
    // (A run with its apply is as its apply: the system area records an apply cut short as interrupted.)
    for (const start of o.store.claimsWithoutApply()) {
      o.store.update(start, "interrupted", INTERRUPTED);
      o.log.warn({ slot_start: iso(start) }, "a scheduled run was interrupted by a stop of the agent");
    }
  }

  /** Starts looking at the schedule: at once (a slot open now runs), then whenever something is due. */
  start(): void {
    this.looks.start();
    void this.looks.runNow();
  }

  /** The schedule was set or removed: the next runs are planned again. */
  changed(): void {
    this.runTimes.clear();
    this.downloads.clear();
    void this.looks.runNow();
  }

  /** Starts nothing more. A run under way is left: its apply is recorded interrupted at the next start. */
  close(): void {
    void this.looks.stop();
  }

  /** When the next slot without a record runs: its planned time, or its start before it is planned. */
  nextRunAt(s: Schedule): number | undefined {
    const now = this.o.now();
    for (const slot of slotsBetween(s.windows, s.timezone, now, now + 8 * DAY))
      if (!this.o.store.has(slot.start)) return this.runTimes.get(slot.start) ?? slot.start;
    return undefined;
  }

  /** One look (see `look`), its failure logged: ms until the next. */
  private lookSafely(): number {
    try {
      return Math.min(this.look(), MAX_SLEEP_MS);
    } catch (err) {
      this.o.log.error({ err }, "the maintenance schedule could not be read; trying again in a minute");
      return MINUTE;
    }
  }

  /** One look: records missed slots, starts the runs and downloads that are due; ms until the next look. */
  private look(): number {
    const stored = this.o.store.read();
    if (stored === undefined) return MAX_SLEEP_MS;
    const { schedule: s, setAt } = stored;
    const now = this.o.now();
    // Every slot over before the newest record was decided by then (recorded, or missed at that look).
    const from = Math.max(setAt, this.o.store.newestStart() ?? setAt, now - LOOKBACK_MS);
    const ahead = s.download_ahead_minutes * MINUTE;
    let sleep = MAX_SLEEP_MS;
    const missed: Slot[] = [];
    for (const slot of slotsBetween(s.windows, s.timezone, from, now + ahead + MAX_SLEEP_MS)) {
      if (this.o.store.has(slot.start)) continue;
      if (slot.end <= now) {
        missed.push(slot);
        continue;
      }
      const at = this.runTimeOf(slot, s);
      if (at <= now) {
        this.begin(slot, s, now);
        continue;
      }
      sleep = Math.min(sleep, at - now);
      if (ahead > 0 && !this.downloads.has(slot.start)) {
        if (slot.start - ahead <= now) this.downloadAhead(slot, s);
        else sleep = Math.min(sleep, slot.start - ahead - now);
      }
    }
    // Only the newest are kept: after a long stop, recording every older slot would only be pruned again.
    for (const slot of missed.slice(-KEPT_RUNS)) this.recordMissed(slot, now);
    for (const start of this.runTimes.keys()) if (start < from) this.runTimes.delete(start);
    return sleep;
  }

  private runTimeOf(slot: Slot, s: Schedule): number {
    let at = this.runTimes.get(slot.start);
    if (at === undefined) {
      at = runTime(slot, s.random_delay_minutes, this.o.random());
      this.runTimes.set(slot.start, at);
    }
    return at;
  }

  private recordMissed(slot: Slot, now: number): void {
    if (this.o.store.claim(slot.start, "missed", now, MISSED))
      this.o.log.warn(
        { slot_start: iso(slot.start), slot_end: iso(slot.end) },
        "a maintenance window closed while the agent was not running; its slot is recorded as missed",
      );
  }

  private downloadAhead(slot: Slot, s: Schedule): void {
    this.downloads.add(slot.start);
    // What the slot's apply will install: its exclusions and minimum ages left out, as the apply leaves them.
    this.o.system.download(s.update_type, { exclude: s.exclude ?? [], minAge: minAgeOf(s) }).then(
      (r) =>
        this.o.log.info(
          { slot_start: iso(slot.start), files: r.downloaded.length, bytes: r.bytes },
          `downloaded ${s.update_type} updates ahead of the maintenance window`,
        ),
      (err: unknown) =>
        this.o.log.warn(
          { err, slot_start: iso(slot.start) },
          "the download ahead of the maintenance window failed; the apply downloads what it needs",
        ),
    );
  }

  /**
   * Claims the slot, then asks for its apply, which takes the claim over as it is recorded; a stop of the
   * agent from the claim on leaves the slot `interrupted`. A refusal before the apply is recorded on the claim.
   */
  private begin(slot: Slot, s: Schedule, now: number): void {
    if (!this.o.store.claim(slot.start, "running", now)) return;
    const slotStart = iso(slot.start);
    this.o.system
      .startApply(
        s.update_type,
        s.reboot !== "never",
        { remote_address: "local", user_agent: null, request_id: `schedule:${slotStart}` },
        s.callback_url ?? undefined,
        {
          trigger: "schedule",
          slotStart,
          exclude: s.exclude ?? [],
          minAge: minAgeOf(s),
          // The window's end, on the clock the apply times its reboot with.
          ...(s.reboot === "never" ? {} : { rebootWindow: { always: s.reboot === "always", by: slot.end } }),
        },
      )
      .then(
        ({ status }) =>
          this.o.log.info(
            { slot_start: slotStart, apply_id: status.id },
            `maintenance window: apply ${status.id} started`,
          ),
        (err: unknown) => this.refused(slot, err),
      )
      .catch((err: unknown) => {
        this.o.log.error({ err, slot_start: slotStart }, "the scheduled run could not be recorded");
      });
  }

  /** The apply did not start: a typed refusal says why in its message; anything else is in the log. */
  private refused(slot: Slot, err: unknown): void {
    const typed = err instanceof Error && typeof (err as { code?: unknown }).code === "string";
    const reason = typed ? (err as Error).message : "the agent failed unexpectedly; see its log";
    this.o.store.update(slot.start, "refused", reason);
    this.o.log.warn({ err, slot_start: iso(slot.start) }, `the scheduled apply did not start: ${reason}`);
  }
}
