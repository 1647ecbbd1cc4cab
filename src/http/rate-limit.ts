/**
 * A token bucket per source address for failed authentications: `burst` failures in a row, then one more
 * each `60 / perMinute` seconds. At most `maxAddresses` buckets are kept; the one touched longest ago goes
 * first, which can only forgive an address, never punish one that did nothing.
 */
export class FailureLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly perMs: number;

  constructor(
    private readonly opts: { burst: number; perMinute: number; now: () => number; maxAddresses?: number },
  ) {
    this.perMs = opts.perMinute / 60_000;
  }

  /**
   * Counts one failure from `address`: undefined while it is within its budget, else the seconds until it
   * has a failure to spend again (for `Retry-After`).
   */
  fail(address: string): number | undefined {
    const b = this.refilled(address);
    // Re-inserted, so the map's order is the order of last use.
    this.buckets.delete(address);
    this.buckets.set(address, b);
    if (this.buckets.size > (this.opts.maxAddresses ?? 10_000)) {
      const oldest = this.buckets.keys().next().value;
      if (oldest !== undefined) this.buckets.delete(oldest);
    }
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return undefined;
    }
    return this.wait(b);
  }

  /**
   * The seconds until `address` may fail again when it has spent its budget, else undefined; counts
   * nothing, so a request refused on it does not prolong its own wait.
   */
  exhausted(address: string): number | undefined {
    if (!this.buckets.has(address)) return undefined;
    const b = this.refilled(address);
    return b.tokens >= 1 ? undefined : this.wait(b);
  }

  private refilled(address: string): { tokens: number; at: number } {
    const now = this.opts.now();
    const b = this.buckets.get(address) ?? { tokens: this.opts.burst, at: now };
    b.tokens = Math.min(this.opts.burst, b.tokens + (now - b.at) * this.perMs);
    b.at = now;
    return b;
  }

  private wait(b: { tokens: number }): number {
    return Math.max(1, Math.ceil((1 - b.tokens) / this.perMs / 1000));
  }

  /** How many addresses have a bucket (bounded by `maxAddresses`). */
  get size(): number {
    return this.buckets.size;
  }
}
