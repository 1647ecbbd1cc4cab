import { type CallbackConnections, CONNECTION_CALLBACK, type DenyList, guardedPost } from "./egress.js";
import { signWebhook } from "./signing.js";
import type { OutboxEvent } from "./store.js";

/** What one attempt learnt from the receiver: its status if one came, and why it failed if it did. */
export interface AttemptResult {
  statusCode: number | null;
  /** Null for a 2xx. */
  error: string | null;
  retryAfterSeconds: number | undefined;
}

/** The connection to the control plane, for events whose `callback_url` is CONNECTION_CALLBACK. */
export interface EventChannel {
  /** Sends the event; resolves with the status the control plane acknowledged it with. */
  deliver(id: string, headers: Record<string, string>, body: Buffer, timeoutMs: number): Promise<number>;
}

export interface DeliveryOptions {
  secret: string;
  deny: DenyList;
  timeoutMs: number;
  connections?: CallbackConnections;
  channel?: EventChannel | undefined;
}

/**
 * POSTs the event's body to its URL as Standard Webhooks describe it (`webhook-id`, a timestamp of this
 * attempt and its signature). A failure to connect, a time-out or a non-2xx answer is a result, not a throw.
 */
export async function deliverSigned(ev: OutboxEvent, opts: DeliveryOptions): Promise<AttemptResult> {
  const timestamp = Math.floor(Date.now() / 1000);
  const headers = {
    "content-type": "application/json",
    "user-agent": "hostkeeper-webhooks/1",
    "webhook-id": ev.id,
    "webhook-timestamp": String(timestamp),
    "webhook-signature": signWebhook(opts.secret, ev.id, timestamp, ev.payload),
  };
  if (ev.url === CONNECTION_CALLBACK) return overConnection(ev, headers, opts);
  try {
    const res = await guardedPost(new URL(ev.url), ev.payload, headers, {
      deny: opts.deny,
      timeoutMs: opts.timeoutMs,
      connections: opts.connections,
    });
    const ok = res.status >= 200 && res.status < 300;
    return {
      statusCode: res.status,
      error: ok ? null : `HTTP ${res.status}${res.bodySnippet ? `: ${res.bodySnippet.slice(0, 200)}` : ""}`,
      retryAfterSeconds: res.retryAfterSeconds,
    };
  } catch (err) {
    return noAnswer((err as Error).message || String(err));
  }
}

/** An attempt that got no answer at all, and why. */
const noAnswer = (error: string): AttemptResult => ({
  statusCode: null,
  error,
  retryAfterSeconds: undefined,
});

/** The same signed event as an `event` frame; the control plane's `ack` status judged as an HTTP answer's. */
async function overConnection(
  ev: OutboxEvent,
  headers: Record<string, string>,
  opts: DeliveryOptions,
): Promise<AttemptResult> {
  if (opts.channel === undefined) return noAnswer("the agent has no connection to a control plane");
  try {
    const status = await opts.channel.deliver(ev.id, headers, Buffer.from(ev.payload), opts.timeoutMs);
    const ok = status >= 200 && status < 300;
    return {
      statusCode: status,
      error: ok ? null : `acknowledged with ${status}`,
      retryAfterSeconds: undefined,
    };
  } catch (err) {
    return noAnswer((err as Error).message || String(err));
  }
}
