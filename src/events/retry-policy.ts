import type { AttemptOutcome } from "../metrics/metrics.js";
import type { AttemptResult } from "./delivery.js";
import type { EventState } from "./event-kinds.js";

/** What an attempt means for its event: its next state, when to try again, and how the metric counts it. */
export interface Verdict {
  state: EventState;
  /** Wait before the next attempt; undefined unless the event stays pending. */
  delayMs: number | undefined;
  outcome: AttemptOutcome;
}

/**
 * A failed attempt waits the schedule's delay for the attempts made since the last redelivery (with +-20%
 * jitter, or longer if the receiver's Retry-After asks, up to a day); past the schedule's end the event is
 * dead. A 410 Gone is the receiver saying it will never want the event: dead at once.
 */
export function judgeAttempt(
  result: AttemptResult,
  attemptsInSchedule: number,
  retryScheduleSeconds: readonly number[],
): Verdict {
  if (result.error === null) return { state: "delivered", delayMs: undefined, outcome: "delivered" };
  if (result.statusCode === 410) return { state: "dead", delayMs: undefined, outcome: "gone" };
  const delayMs = nextDelayMs(retryScheduleSeconds, attemptsInSchedule, result.retryAfterSeconds);
  return delayMs === undefined
    ? { state: "dead", delayMs, outcome: "dead" }
    : { state: "pending", delayMs, outcome: "failed" };
}

function nextDelayMs(
  schedule: readonly number[],
  attempts: number,
  retryAfterSeconds: number | undefined,
): number | undefined {
  const base = schedule[attempts - 1];
  if (base === undefined) return undefined;
  const jittered = base * (0.8 + Math.random() * 0.4);
  const wait = Math.max(jittered, Math.min(retryAfterSeconds ?? 0, 86_400));
  return Math.round(wait * 1000);
}
