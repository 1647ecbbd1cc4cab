import type { Logger } from "pino";
import type { AppConfig } from "../settings.js";
import type { InstanceHealth } from "./instance-health.js";
import type { Instances } from "./instances.js";
import type { Slots } from "./slots.js";
import type { OperatorStore } from "./store.js";

export type OperatorConfig = AppConfig["operator"];

/** What the steps of an update share: where its state is kept, what runs in each slot, and when to stop. */
export interface UpdateContext {
  store: OperatorStore;
  slots: Slots;
  instances: Instances;
  health: InstanceHealth;
  config: OperatorConfig;
  dataDir: string;
  log: Logger;
  /** Aborted when the agent stops: an update leaves off where it is, and the next start picks it up. */
  signal: AbortSignal;
}
