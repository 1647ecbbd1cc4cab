import { sleep } from "./timers.js";

export interface RetryOptions {
  /** Attempts in all, the first included. */
  attempts: number;
  /** The wait (ms) before retry `n`, the first retry being 0: see `doubling`. */
  delayMs: (retry: number) => number;
  /** Whether a failure may be retried at all; by default every one may. */
  retryable?: (err: unknown) => boolean;
  /**
   * Asked after the wait, before the next attempt: whether sending it again is safe (a write must show
   * that the failed attempt changed nothing). False, or a rejection, throws the failure as it came.
   */
  check?: (err: unknown) => Promise<boolean>;
  /** Cuts a wait short, ending the retries: the last failure is thrown. */
  signal?: AbortSignal;
}

/** Waits of `firstMs`, doubled for each further retry, at most `maxMs`. */
export const doubling =
  (firstMs: number, maxMs = Number.POSITIVE_INFINITY) =>
  (retry: number): number =>
    Math.min(firstMs * 2 ** retry, maxMs);

/**
 * The one retry of the agent: runs `attempt` until it succeeds, fails with what `retryable` refuses, or
 * has used its attempts, waiting `delayMs` between attempts (and asking `check` before each retry). The
 * failure that ends it is thrown as it came.
 */
export async function retried<T>(attempt: () => Promise<T>, o: RetryOptions): Promise<T> {
  for (let retry = 0; ; retry++) {
    try {
      return await attempt();
    } catch (err) {
      if (retry >= o.attempts - 1 || !(o.retryable?.(err) ?? true)) throw err;
      await sleep(o.delayMs(retry), o.signal).catch(() => {
        throw err;
      });
      if (o.check && !(await o.check(err).catch(() => false))) throw err;
    }
  }
}
