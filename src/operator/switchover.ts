import { sleep } from "../util/timers.js";
import type { CrashMonitor } from "./crash-monitor.js";
import type { UpdateErrorCode } from "./failure.js";
import { isRunning } from "./instances.js";
import type { RouteSync } from "./route-sync.js";
import type { Slot, UpdateRow } from "./store.js";
import type { UpdateContext } from "./update-context.js";

/** Failed health checks in a row, after the switch, that count as the new instance turning unhealthy. */
const WATCH_FAILURES = 3;

/** The slot an update installs into; chosen when it starts downloading, so set for any update past that. */
function newSlot(u: UpdateRow): Slot {
  if (u.new_slot === null) throw new Error(`update ${u.id} has no new slot`);
  return u.new_slot;
}

/**
 * An update from its switch to its end: `switching` (the route points at the new slot) -> `draining` (the
 * old instance finishes its requests, then stops; the new one is watched) -> `completed`. A failure on the
 * way switches back: `rolled_back` with the previous instance serving again, or `failed` when there was none
 * (a first install) or switching back failed too (`rollback_failed`).
 *
 * Throughout, the crash monitor and the route sync are paused: what runs and where the route points is the
 * update's alone.
 */
export class Switchover {
  constructor(
    private readonly ctx: UpdateContext,
    private readonly route: RouteSync,
    private readonly monitor: CrashMonitor,
  ) {}

  /** Switches update `id`, whose new instance has passed its health gate, and sees it to its end. */
  async switchTo(id: string): Promise<void> {
    this.ctx.store.transition(id, "switching");
    await this.inCharge(() => this.switchAndWatch(id));
  }

  /**
   * Carries on with an update a restart (`why`) interrupted at or after its switch: finished when the new
   * instance is (or becomes, within the health time-out) healthy, else rolled back; a rollback that was under
   * way is carried on.
   */
  async resume(u: UpdateRow, why: string): Promise<void> {
    await this.inCharge(async () => {
      const problem =
        u.error_message ??
        (await this.ctx.health.gate(newSlot(u), this.ctx.config.healthTimeoutMs).then(
          () => undefined,
          (err: Error) => `${why} during ${u.state} and the new instance was not healthy: ${err.message}`,
        ));
      if (this.ctx.signal.aborted) return;
      if (problem !== undefined)
        return await this.rollback(u.id, u.error_code ?? "new_instance_failed", problem);
      await this.switchAndWatch(u.id);
    });
  }

  /** Points the route at the new slot, then drains the old instance and watches the new one. */
  private async switchAndWatch(id: string): Promise<void> {
    const u = this.ctx.store.get(id);
    this.ctx.store.setActive(newSlot(u));
    try {
      await this.route.sync();
    } catch (err) {
      return this.rollback(
        id,
        "switch_failed",
        `switching the operator's route failed: ${(err as Error).message}`,
      );
    }
    if (u.state === "switching") this.ctx.store.transition(id, "draining");
    await this.watch(id);
  }

  /**
   * After the switch: the old instance gets no new requests, finishes its in-flight ones and stays ready to
   * switch back to for the drain time; the new one must stay alive and healthy for the watch period.
   */
  private async watch(id: string): Promise<void> {
    const { store, slots, health, config } = this.ctx;
    const u = store.get(id);
    const target = newSlot(u);
    const since = Date.now();
    let oldStopped = u.previous_slot === null;
    let failures = 0;
    for (;;) {
      const row = store.slot(target);
      if (!isRunning(row))
        return this.rollback(
          id,
          "new_instance_failed",
          `the new instance exited ${Date.now() - since} ms after the switch`,
        );
      failures = row.port !== null && (await health.check(row.port)) ? 0 : failures + 1;
      if (failures >= WATCH_FAILURES)
        return this.rollback(
          id,
          "new_instance_failed",
          `the new instance failed ${WATCH_FAILURES} health checks in a row after the switch`,
        );
      const elapsed = Date.now() - since;
      if (!oldStopped && elapsed >= config.drainMs && u.previous_slot) {
        await slots.stop(u.previous_slot);
        oldStopped = true;
      }
      if (oldStopped && elapsed >= config.watchMs) break;
      try {
        await sleep(config.checkIntervalMs, this.ctx.signal);
      } catch {
        return;
      }
    }
    store.transition(id, "completed", { error_code: null, error_message: null });
  }

  /**
   * Goes back to the previous instance: restarts it if it is gone, points the route at it, stops the new
   * one. The reason is recorded first, so an agent restart in the middle carries the rollback on.
   */
  private async rollback(id: string, code: UpdateErrorCode, message: string): Promise<void> {
    const { store, slots, health, config, log } = this.ctx;
    store.setError(id, code, message);
    const u = store.get(id);
    const neu = newSlot(u);
    const old = u.previous_slot;
    log.warn({ update: id, code, err: message }, "operator update failed after the switch; switching back");
    try {
      if (old === null) {
        // A first install has nothing to go back to: the route answers 503 rather than pointing at a dead port.
        await slots.stop(neu);
        store.setActive(null);
        await this.route.sync();
        store.transition(id, "failed");
        return;
      }
      if (!isRunning(store.slot(old))) {
        slots.start(old);
        await health.gate(old, config.healthTimeoutMs);
      }
      store.setActive(old);
      await this.route.sync();
      await slots.stop(neu);
      store.transition(id, "rolled_back");
    } catch (err) {
      if (this.ctx.signal.aborted) return;
      // Once the update has ended, the route sync points the route at the active slot until that succeeds,
      // and the crash monitor keeps the active instance running and stops the one beside it.
      store.transition(id, "failed", {
        error_code: "rollback_failed",
        error_message: `${message}; switching back failed: ${(err as Error).message}`,
      });
    }
  }

  /**
   * Runs `step` with the crash monitor and the route sync paused. Pausing waits for a check or a sync already
   * under way, so none of theirs lands in the middle of the switch.
   */
  private async inCharge(step: () => Promise<void>): Promise<void> {
    await Promise.all([this.monitor.pause(), this.route.pause()]);
    try {
      await step();
    } finally {
      this.monitor.resume();
      this.route.resume();
    }
  }
}
