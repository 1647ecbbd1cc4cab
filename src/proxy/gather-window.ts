import { setImmediate } from "node:timers/promises";
import { sleep as realSleep } from "../util/timers.js";

export interface GatherWindowOptions {
  /** The window's bound as a share of what the last write took (0.1: a tenth of it). */
  share: number;
  /** The bound whatever the last write took. */
  maxMs: number;
  /** The wait ends once no change has come for this long (or a quarter of the bound, if less). */
  quietMs: number;
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
}

/**
 * How long a change that finds the writer idle waits for others to join it, so that a burst of changes
 * reaches Caddy as one config change (one reload) rather than the first alone and the rest after it. The
 * wait is sized from what a write costs now: a short wait is free beside the slow reload of a large config
 * and not beside the quick reload of a small one, so a write that fast lets a change go at once. It ends
 * when no change came for `quietMs` (or a quarter of the bound, if less), and never lasts past its bound: a
 * change alone pays the quiet time only, a burst whose changes keep arriving all of it.
 */
export class GatherWindow {
  private lastWriteMs = 0;
  private readonly now: () => number;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(private readonly o: GatherWindowOptions) {
    this.now = o.now ?? (() => performance.now());
    this.sleep = o.sleep ?? ((ms) => realSleep(ms));
  }

  /** What the last write to Caddy took. */
  wrote(ms: number): void {
    this.lastWriteMs = ms;
  }

  /** How long a change may wait for followers now; under a millisecond it does not wait at all. */
  boundMs(): number {
    const bound = Math.min(this.o.maxMs, this.lastWriteMs * this.o.share);
    return bound < 1 ? 0 : bound;
  }

  /**
   * How much longer a change that arrived `waitedMs` ago may wait for followers: the bound less what it has
   * waited already (behind a read of the routes, say); 0 when it must go now.
   */
  leftMs(waitedMs: number): number {
    const bound = this.boundMs();
    return bound === 0 ? 0 : Math.max(0, bound - Math.max(0, waitedMs));
  }

  /**
   * Waits while changes keep arriving (`arrived` counts them), never past the bound counted from the arrival
   * of the change that waits, `waitedMs` ago.
   */
  async gather(arrived: () => number, waitedMs = 0): Promise<void> {
    const bound = this.boundMs();
    const window = this.leftMs(waitedMs);
    if (window === 0) return;
    const end = this.now() + window;
    let seen = arrived();
    for (;;) {
      const left = end - this.now();
      if (left <= 0) return;
      // A quarter of the bound at most: a change alone pays little of a small bound.
      await this.sleep(Math.min(this.o.quietMs, bound / 4, left));
      // Timers run before the I/O that came meanwhile: after an event loop that was busy for longer than
      // the quiet time, let that I/O in before judging the burst over.
      await setImmediate();
      const count = arrived();
      if (count === seen) return;
      seen = count;
    }
  }
}
