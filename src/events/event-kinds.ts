/** `pending` until a 2xx (`delivered`) or until the retry schedule runs out or the receiver says 410 (`dead`). */
export const EVENT_STATES = ["pending", "delivered", "dead"] as const;
export type EventState = (typeof EVENT_STATES)[number];
