import type { Logger } from "pino";
import { Periodic } from "../util/periodic.js";
import { doubling } from "../util/retry.js";
import { isRunning } from "./instances.js";
import type { Slots } from "./slots.js";
import { type OperatorStore, otherSlot } from "./store.js";

export interface CrashMonitorOptions {
  store: OperatorStore;
  slots: Slots;
  checkIntervalMs: number;
  /**
   * First delay before a restart; it doubles per crash up to 64 times this, and resets once an instance
   * stays up that long.
   */
  restartBackoffMs: number;
  /** Whether an update, or the recovery of one, is under way: the idle slot is its own then. */
  updateUnderWay: () => boolean;
  log: Logger;
}

/**
 * Keeps the active operator instance running: every check interval, restarts it when it has crashed (with
 * doubling delays) and stops an instance left running in the idle slot, as by a rollback that could not
 * finish. An update pauses it from its switch on, when the update alone decides what runs where.
 */
export class CrashMonitor {
  private readonly checks: Periodic;
  private restarts = { count: 0, notBefore: 0 };

  constructor(private readonly o: CrashMonitorOptions) {
    this.checks = new Periodic({
      intervalMs: o.checkIntervalMs,
      round: () => this.check(),
      what: "operator instance check",
      log: o.log,
    });
  }

  start(): void {
    this.checks.start();
  }

  /** No check starts until `resume`; resolves once the one under way, if any, has ended. */
  pause(): Promise<void> {
    return this.checks.pause();
  }

  resume(): void {
    this.checks.resume();
  }

  /** No check starts again; resolves once the one under way, if any, has ended. */
  stop(): Promise<void> {
    return this.checks.stop();
  }

  private async check(): Promise<void> {
    const active = this.o.store.active();
    if (!active?.version) return;
    const base = this.o.restartBackoffMs;
    if (!isRunning(active)) {
      if (Date.now() < this.restarts.notBefore) return;
      const delay = doubling(base, base * 64)(this.restarts.count);
      this.restarts = { count: this.restarts.count + 1, notBefore: Date.now() + delay };
      this.o.log.warn(
        { slot: active.slot, restarts: this.restarts.count },
        "the active operator instance is down; restarting it",
      );
      this.o.slots.start(active.slot);
    } else if (Date.now() - Date.parse(active.started_at ?? "") > base * 64) {
      this.restarts = { count: 0, notBefore: 0 };
    }
    if (!this.o.updateUnderWay()) await this.o.slots.stop(otherSlot(active.slot));
  }
}
