import type { Logger } from "pino";

export interface PeriodicOptions {
  intervalMs: number;
  /** One round of the work. A failure is logged; the next round is the retry. */
  round: () => Promise<void>;
  /** What a round does, for the log line of a failed one. */
  what: string;
  log: Logger;
}

type State = "new" | "running" | "paused" | "stopped";

/**
 * Background work in rounds, one every interval and never two at once (a round due while one is under way
 * is skipped). `start` once; `pause` and `resume` while someone else must have the work's subject to itself;
 * `stop` for good. Only a running one has a timer, and it does not keep the process alive.
 */
export class Periodic {
  private state: State = "new";
  private timer: NodeJS.Timeout | undefined;
  private current: Promise<void> | undefined;

  constructor(private readonly o: PeriodicOptions) {}

  start(): void {
    if (this.state !== "new") return;
    this.state = "running";
    this.arm();
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

  resume(): void {
    if (this.state !== "paused") return;
    this.state = "running";
    this.arm();
  }

  /** Starts no round ever again, and resolves once the round under way, if any, has ended. */
  stop(): Promise<void> {
    this.state = "stopped";
    this.disarm();
    return this.settled();
  }

  private arm(): void {
    this.timer = setInterval(() => this.tick(), this.o.intervalMs);
    this.timer.unref();
  }

  private disarm(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private tick(): void {
    if (this.current) return;
    this.current = this.o
      .round()
      .catch((err: unknown) => this.o.log.warn({ err }, `${this.o.what} failed; will retry`))
      .finally(() => {
        this.current = undefined;
      });
  }

  private settled(): Promise<void> {
    return this.current ?? Promise.resolve();
  }
}
