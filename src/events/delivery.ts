import { type CallbackConnections, type DenyList, guardedPost } from "./egress.js";
import { signWebhook } from "./signing.js";
import type { OutboxEvent } from "./store.js";

/** What one attempt learnt from the receiver: its status if one came, and why it failed if it did. */
export interface AttemptResult {
  statusCode: number | null;
  /** Null for a 2xx. */
  error: string | null;
  retryAfterSeconds: number | undefined;
}

export interface DeliveryOptions {
  secret: string;
  deny: DenyList;
  timeoutMs: number;
  connections?: CallbackConnections;
}

/**
 * POSTs the event's body to its URL as Standard Webhooks describe it (`webhook-id`, a timestamp of this
 * attempt and its signature). A failure to connect, a time-out or a non-2xx answer is a result, not a throw.
 */
export async function deliverSigned(ev: OutboxEvent, opts: DeliveryOptions): Promise<AttemptResult> {
  const timestamp = Math.floor(Date.now() / 1000);
  try {
    const res = await guardedPost(
      new URL(ev.url),
      ev.payload,
      {
        "content-type": "application/json",
        "user-agent": "hostkeeper-webhooks/1",
        "webhook-id": ev.id,
        "webhook-timestamp": String(timestamp),
        "webhook-signature": signWebhook(opts.secret, ev.id, timestamp, ev.payload),
      },
      { deny: opts.deny, timeoutMs: opts.timeoutMs, connections: opts.connections },
    );
    const ok = res.status >= 200 && res.status < 300;
    return {
      statusCode: res.status,
      error: ok ? null : `HTTP ${res.status}${res.bodySnippet ? `: ${res.bodySnippet.slice(0, 200)}` : ""}`,
      retryAfterSeconds: res.retryAfterSeconds,
    };
  } catch (err) {
    return { statusCode: null, error: (err as Error).message || String(err), retryAfterSeconds: undefined };
  }
}
