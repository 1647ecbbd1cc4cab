import { UpdateFailure } from "./failure.js";
import type { Instances } from "./instances.js";
import type { OperatorStore, Slot } from "./store.js";

/**
 * Starts and stops the instance of a slot and records its process in the store at once: the store names what
 * runs in each slot, for the update, the crash monitor and an agent started later (which adopts it).
 */
export class Slots {
  constructor(
    private readonly store: OperatorStore,
    private readonly instances: Instances,
    private readonly ports: Readonly<Record<Slot, number>>,
  ) {}

  /** Starts the version installed in `slot` on the slot's port. */
  start(slot: Slot): void {
    const row = this.store.slot(slot);
    if (!row.version) throw new UpdateFailure("start_failed", `slot ${slot} has no operator installed`);
    this.store.setProcess(slot, this.instances.start(slot, row.version, this.ports[slot]));
  }

  /** Stops the slot's instance, if one runs (SIGTERM, then SIGKILL after the stop time-out). */
  async stop(slot: Slot): Promise<void> {
    const row = this.store.slot(slot);
    await this.instances.stop(row, slot);
    if (row.pid !== null) this.store.clearProcess(slot, row.pid);
  }
}
