/*
 * Maintenance windows as instants: a window is weekdays, a local start time and a length in a time zone;
 * each weekday it names gives one slot, from the local start to the start plus the length. Pure functions
 * of the time they are given (the scheduler passes its clock), with the zone's rules from Intl.
 */

export const WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"] as const;
export type Weekday = (typeof WEEKDAYS)[number];

export interface Window {
  days: readonly Weekday[];
  /** Local time of day, `HH:MM` (00:00-23:59). */
  start: string;
  duration_minutes: number;
}

/** One occurrence of a window, in ms since the epoch; `end` is not part of it. */
export interface Slot {
  start: number;
  end: number;
}

const MINUTE = 60_000;
const DAY = 86_400_000;

const formats = new Map<string, Intl.DateTimeFormat>();

function formatOf(zone: string): Intl.DateTimeFormat {
  let f = formats.get(zone);
  if (f === undefined) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone: zone,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
    });
    formats.set(zone, f);
  }
  return f;
}

/** Whether Intl knows `zone` as a named time zone (an offset such as `+01:00` is not one). */
export function isKnownTimeZone(zone: string): boolean {
  try {
    return !/^[+-]/.test(formatOf(zone).resolvedOptions().timeZone);
  } catch {
    return false;
  }
}

/** The local time at instant `t` in `zone`, written as if it were UTC (ms): what a wall clock there shows. */
export function wallClock(zone: string, t: number): number {
  const parts: Record<string, number> = {};
  for (const p of formatOf(zone).formatToParts(t)) if (p.type !== "literal") parts[p.type] = Number(p.value);
  const { year = 0, month = 1, day = 1, hour = 0, minute = 0, second = 0 } = parts;
  return Date.UTC(year, month - 1, day, hour, minute, second);
}

/**
 * The instant a wall clock in `zone` shows `wall` (local time written as UTC, on a whole minute). A local
 * time that happens twice (clocks set back) is its first occurrence; one that does not happen (clocks set
 * forward) moves to the next minute that does, the end of the gap.
 */
export function localToInstant(zone: string, wall: number): number {
  // A zone's offset changes at most once a day: the offsets a day either side cover both sides of a change.
  const offsets = new Set([wall - DAY, wall, wall + DAY].map((t) => wallClock(zone, t) - t));
  const candidates = [...offsets].map((o) => wall - o).sort((a, b) => a - b);
  const exact = candidates.find((t) => wallClock(zone, t) === wall);
  if (exact !== undefined) return exact;
  // In a gap: the first minute whose wall clock is at or past `wall` is the change itself.
  let lo = Math.floor((candidates[0] ?? wall) / MINUTE);
  let hi = Math.ceil((candidates.at(-1) ?? wall) / MINUTE);
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (wallClock(zone, mid * MINUTE) >= wall) hi = mid;
    else lo = mid + 1;
  }
  return lo * MINUTE;
}

const minutesOf = (start: string) => {
  const [h = "0", m = "0"] = start.split(":");
  return Number(h) * 60 + Number(m);
};

/**
 * The slots of `windows` in `zone` that are not over at `from` and have begun by `to` (`end > from`,
 * `start <= to`), by start. Windows starting at the same instant give one slot, the longest.
 */
export function slotsBetween(windows: readonly Window[], zone: string, from: number, to: number): Slot[] {
  const byStart = new Map<number, Slot>();
  // A slot's local day is at most a day before `from` (its length is at most a day) and the zone's offset
  // moves its instant by less than another day; the last local day is at most a day after `to`.
  const firstDay = Math.floor(wallClock(zone, from) / DAY) - 2;
  const lastDay = Math.floor(wallClock(zone, to) / DAY) + 1;
  for (let day = firstDay; day <= lastDay; day++) {
    const weekday = WEEKDAYS[new Date(day * DAY).getUTCDay()] as Weekday;
    for (const w of windows) {
      if (!w.days.includes(weekday)) continue;
      const start = localToInstant(zone, day * DAY + minutesOf(w.start) * MINUTE);
      const end = start + w.duration_minutes * MINUTE;
      if (end <= from || start > to) continue;
      const same = byStart.get(start);
      if (same === undefined || same.end < end) byStart.set(start, { start, end });
    }
  }
  return [...byStart.values()].sort((a, b) => a.start - b.start);
}

/** The slot open at `now`, or else the next one to open (every window names a day, so one opens within a week). */
export function nextSlot(windows: readonly Window[], zone: string, now: number): Slot | undefined {
  return slotsBetween(windows, zone, now, now + 8 * DAY)[0];
}

/**
 * When a slot's apply starts: its start plus a random delay of up to `randomDelayMinutes` (`fraction` in
 * [0, 1), e.g. `Math.random()`), always before the slot's end.
 */
export function runTime(slot: Slot, randomDelayMinutes: number, fraction: number): number {
  const span = Math.min(randomDelayMinutes * MINUTE, slot.end - slot.start);
  const delay = Math.floor(Math.min(Math.max(fraction, 0), 1) * span);
  return Math.min(slot.start + delay, slot.end - 1);
}
