import { join } from "node:path";
import { sleep } from "../util/timers.js";
import { UpdateFailure } from "./failure.js";
import { checkHealth, type Instances, isRunning } from "./instances.js";
import type { OperatorStore, Slot } from "./store.js";

const HEALTH_REQUEST_TIMEOUT_MS = 2000;

export interface InstanceHealthOptions {
  store: OperatorStore;
  instances: Instances;
  healthPath: string;
  healthTimeoutMs: number;
  checkIntervalMs: number;
  /** Ends a gate early when the agent stops. */
  signal: AbortSignal;
}

/** Whether an operator instance answers its health path, once or until it does. */
export class InstanceHealth {
  constructor(private readonly o: InstanceHealthOptions) {}

  /** One GET of the health path on `port`: true on 2xx. */
  check(port: number): Promise<boolean> {
    const timeout = Math.min(HEALTH_REQUEST_TIMEOUT_MS, this.o.healthTimeoutMs);
    return checkHealth(port, this.o.healthPath, timeout);
  }

  /** Waits for the slot's instance to answer its health path, failing when it exits or time runs out. */
  async gate(slot: Slot, timeoutMs: number): Promise<void> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const row = this.o.store.slot(slot);
      if (!isRunning(row))
        throw new UpdateFailure(
          "start_failed",
          `the ${slot} instance exited before it was healthy; see ${join(this.o.instances.slotDir(slot), "output.log")}`,
        );
      if (row.port !== null && (await this.check(row.port))) return;
      if (Date.now() >= end)
        throw new UpdateFailure(
          "health_check_failed",
          `the ${slot} instance did not answer ${this.o.healthPath} with 2xx within ${timeoutMs} ms`,
        );
      await sleep(this.o.checkIntervalMs, this.o.signal);
    }
  }
}
