/** Every kind of event the agent writes: one list for the outbox's writers and the listing's `type` filter. */
export const EVENT_TYPES = [
  "route_backup",
  "route_change",
  "operator_update",
  "system_update",
  "agent_update",
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** `pending` until a 2xx (`delivered`) or until the retry schedule runs out or the receiver says 410 (`dead`). */
export const EVENT_STATES = ["pending", "delivered", "dead"] as const;
export type EventState = (typeof EVENT_STATES)[number];
