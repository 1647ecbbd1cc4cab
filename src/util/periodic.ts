import type { Logger } from "pino";

export interface PeriodicOptions {
  /**
   * The wait after a round before the next, unless the round answers its own; without it (or `Infinity`)
   * a round that answers nothing is followed only by one asked for with `soon` or `runNow`.
   */
  intervalMs?: number;
  /**
   * One round of the work, synchronous or not. A loop whose wait varies (a queue's next due item, a
   * calendar's next slot) answers it, a number of ms; any other answer means the interval. A failure is
   * logged; the next round is the retry.
   */
  round: () => unknown;
  /** What a round does, for the log line of a failed one. */
  what: string;
  log: Logger;
}

type State = "new" | "running" | "paused" | "stopped";

const isPromise = (v: unknown): v is Promise<unknown> =>
  typeof (v as Promise<unknown> | undefined)?.then === "function";

/** The wait a round answered; undefined when it answered none. */
const waitOf = (answer: unknown): number | undefined => (typeof answer === "number" ? answer : undefined);

/**
 * The one shape of background work in the agent: rounds, never two at once, each followed by a wait (the
 * interval, or what the round answered), on one timer that never keeps the process alive. `start` once;
 * `soon` and `runNow` bring a round forward (work arrived, a setting changed); `pause` and `resume` while
 * someone else must have the work's subject to itself; `stop` for good, waiting for the round under way.
 */
export class Periodic {
  private state: State = "new";
  private timer: NodeJS.Timeout | undefined;
  /** When the armed timer fires (ms since the epoch); Infinity when none is armed. */
  private timerAt = Number.POSITIVE_INFINITY;
  private current: Promise<void> | undefined;
  /** A round asked for while one was under way: when it is due (ms since the epoch). */
  private askedAt = Number.POSITIVE_INFINITY;

  constructor(private readonly o: PeriodicOptions) {}

  /** Starts the loop: its first round comes after the interval (or when asked for). */
  start(): void {
    if (this.state !== "new") return;
    this.state = "running";
    this.arm(this.o.intervalMs);
  }

  /**
   * A round at once (a synchronous round has run when this returns), unless one is under way: then another
   * follows it at once. Resolves when the round it ran, or the one under way, has ended. Only while running.
   */
  runNow(): Promise<void> {
    if (this.state !== "running") return Promise.resolve();
    return this.fire();
  }

  /** The next round within `ms`, unless one is due sooner already. Only while running. */
  soon(ms = 0): void {
    if (this.state !== "running") return;
    if (this.current) this.askedAt = Math.min(this.askedAt, Date.now() + ms);
    else this.arm(ms);
  }

  /**
   * Starts no round until `resume`, and resolves once the round under way, if any, has ended. Pauses do not
   * nest: the first `resume` resumes. Before `start` and after `stop` it changes nothing.
   */
  pause(): Promise<void> {
    if (this.state === "running") {
      this.state = "paused";
      this.disarm();
    }
    return this.settled();
  }

  /** Rounds again, the next after the interval. */
  resume(): void {
    if (this.state !== "paused") return;
    this.state = "running";
    this.arm(this.o.intervalMs);
  }

  /** Starts no round ever again, and resolves once the round under way, if any, has ended. */
  stop(): Promise<void> {
    this.state = "stopped";
    this.disarm();
    return this.settled();
  }

  /** Arms the timer for `ms` from now, unless it is armed to fire sooner already; none for Infinity. */
  private arm(ms: number | undefined): void {
    if (ms === undefined || !Number.isFinite(ms)) return;
    const wait = Math.max(0, ms);
    const at = Date.now() + wait;
    if (this.timer !== undefined && this.timerAt <= at) return;
    clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => void this.fire(), wait);
    this.timer.unref();
  }

  private disarm(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
    this.askedAt = Number.POSITIVE_INFINITY;
  }

  /** Runs one round now, then arms the wait after it; one under way (resumed meanwhile) goes first. */
  private fire(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
    if (this.current) {
      this.askedAt = Date.now();
      return this.current;
    }
    let answer: unknown;
    try {
      answer = this.o.round();
    } catch (err) {
      this.failed(err);
      answer = undefined;
    }
    if (!isPromise(answer)) {
      this.next(waitOf(answer));
      return Promise.resolve();
    }
    const current = answer.then(
      (wait) => {
        this.current = undefined;
        this.next(waitOf(wait));
      },
      (err: unknown) => {
        this.current = undefined;
        this.failed(err);
        this.next(undefined);
      },
    );
    this.current = current;
    return current;
  }

  /** After a round: the wait it answered (or the interval), or sooner when a round was asked for meanwhile. */
  private next(wait: number | undefined): void {
    const asked = this.askedAt - Date.now();
    this.askedAt = Number.POSITIVE_INFINITY;
    if (this.state !== "running") return;
    this.arm(Math.min(wait ?? this.o.intervalMs ?? Number.POSITIVE_INFINITY, asked));
  }

  private failed(err: unknown): void {
    this.o.log.warn({ err }, `${this.o.what} failed; will retry`);
  }

  private settled(): Promise<void> {
    return this.current ?? Promise.resolve();
  }
}
