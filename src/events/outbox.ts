import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import type { AttemptOutcome, Metrics } from "../metrics/metrics.js";
import type { Db, Migration } from "../store/db.js";
import { settledWithin } from "../util/timers.js";
import { type DenyList, guardedPost } from "./egress.js";
import { signWebhook } from "./signing.js";

export const outboxMigrations: Migration[] = [
  {
    name: "events.001_outbox",
    sql: `
      CREATE TABLE outbox_events (
        id TEXT PRIMARY KEY,
        type TEXT NOT NULL,
        url TEXT NOT NULL,
        payload TEXT NOT NULL,
        ordering_key TEXT,
        state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        delivered_at TEXT,
        last_error TEXT
      );
      CREATE INDEX outbox_events_due ON outbox_events (state, next_attempt_at);
      CREATE INDEX outbox_events_order ON outbox_events (ordering_key, state, created_at);
      CREATE TABLE outbox_attempts (
        event_id TEXT NOT NULL REFERENCES outbox_events (id),
        attempt INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        duration_ms INTEGER NOT NULL,
        status_code INTEGER,
        error TEXT,
        PRIMARY KEY (event_id, attempt)
      );`,
  },
  {
    // A redelivered event starts the retry schedule again without renumbering its attempts, which stay
    // recorded: the schedule counts the attempts made since `schedule_offset`.
    name: "events.002_redelivery",
    sql: `
      ALTER TABLE outbox_events ADD COLUMN schedule_offset INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE outbox_events ADD COLUMN redelivered_at TEXT;`,
  },
];

export type EventState = "pending" | "delivered" | "dead";

export interface OutboxEvent {
  id: string;
  type: string;
  url: string;
  payload: string;
  ordering_key: string | null;
  state: EventState;
  attempts: number;
  next_attempt_at: number;
  created_at: string;
  delivered_at: string | null;
  last_error: string | null;
  /** Attempts made before the last redelivery; the retry schedule counts from here. */
  schedule_offset: number;
  redelivered_at: string | null;
}

export interface OutboxAttempt {
  attempt: number;
  started_at: string;
  duration_ms: number;
  status_code: number | null;
  error: string | null;
}

export interface EventFilter {
  state?: EventState;
  type?: string;
  limit: number;
}

export type RedeliverResult =
  | { ok: true; event: OutboxEvent }
  | { ok: false; reason: "not_found" | "pending"; event?: OutboxEvent };

export interface OutboxOptions {
  secret: string;
  deny: DenyList;
  /** Time-out of one attempt by the background worker. */
  timeoutMs: number;
  /** Delays in seconds after attempt 1, 2, ...; after the last one the event is dead. */
  retryScheduleSeconds: readonly number[];
  log: Logger;
  /** How many deliveries the worker runs at once. */
  concurrency?: number;
  metrics?: Metrics;
}

export interface NewEvent {
  type: string;
  url: string;
  data: unknown;
  /** Events with the same key are delivered one at a time, in the order they were written. */
  orderingKey?: string;
}

/**
 * Durable outbox for callbacks. An event is a row written in the caller's transaction, so it exists exactly
 * when the state change it reports does; a worker delivers due events, records every attempt, retries on a
 * bounded schedule with jitter, and dead-letters what exhausts it. Rows left pending by a previous run of the
 * agent are picked up at start.
 */
export class Outbox {
  private readonly inFlight = new Set<string>();
  private readonly keysInFlight = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private timerAt = 0;
  private closed = false;
  private running = new Set<Promise<void>>();
  /** Attempts made by deliverNow, outside the worker's concurrency. */
  private readonly firstAttempts = new Set<Promise<boolean>>();
  private readonly concurrency: number;

  private readonly insert;
  private readonly due;
  private readonly earliest;
  private readonly blockedByEarlier;
  private readonly recordAttempt;
  private readonly updateAfterAttempt;
  private readonly byId;
  private readonly listed;
  private readonly attemptsOfIds;
  private readonly markRedelivered;
  private readonly byState;

  constructor(
    private readonly db: Db,
    private readonly opts: OutboxOptions,
  ) {
    this.concurrency = opts.concurrency ?? 4;
    this.insert = db.prepare(
      `INSERT INTO outbox_events (id, type, url, payload, ordering_key, state, attempts, next_attempt_at, created_at)
       VALUES (@id, @type, @url, @payload, @ordering_key, 'pending', 0, @next_attempt_at, @created_at)`,
    );
    this.due = db.prepare(
      "SELECT * FROM outbox_events WHERE state = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at, created_at LIMIT 64",
    );
    this.earliest = db.prepare(
      "SELECT MIN(next_attempt_at) AS at FROM outbox_events WHERE state = 'pending'",
    );
    this.blockedByEarlier = db.prepare(
      `SELECT 1 FROM outbox_events WHERE ordering_key = ? AND state = 'pending' AND rowid < (SELECT rowid FROM outbox_events WHERE id = ?) LIMIT 1`,
    );
    this.recordAttempt = db.prepare(
      `INSERT INTO outbox_attempts (event_id, attempt, started_at, duration_ms, status_code, error)
       VALUES (?, ?, ?, ?, ?, ?)`,
    );
    this.updateAfterAttempt = db.prepare(
      `UPDATE outbox_events SET attempts = @attempts, state = @state, next_attempt_at = @next_attempt_at,
         delivered_at = @delivered_at, last_error = @last_error WHERE id = @id`,
    );
    this.byId = db.prepare("SELECT * FROM outbox_events WHERE id = ?");
    // Counted on the (state, next_attempt_at) index, without reading a row.
    this.byState = db.prepare("SELECT state, count(*) AS n FROM outbox_events GROUP BY state");
    // Newest first in the order written (rowid), which needs no sort however many events are kept.
    this.listed = db.prepare(
      `SELECT * FROM outbox_events WHERE (@state IS NULL OR state = @state) AND (@type IS NULL OR type = @type)
       ORDER BY rowid DESC LIMIT @limit`,
    );
    this.attemptsOfIds = db.prepare(
      `SELECT event_id, attempt, started_at, duration_ms, status_code, error FROM outbox_attempts
       WHERE event_id IN (SELECT value FROM json_each(?)) ORDER BY event_id, attempt`,
    );
    this.markRedelivered = db.prepare(
      `UPDATE outbox_events SET state = 'pending', next_attempt_at = @now, schedule_offset = attempts,
         redelivered_at = @at, delivered_at = NULL WHERE id = @id AND state != 'pending'`,
    );
  }

  /** Writes an event; call inside the transaction that records the change it reports. Returns its id. */
  add(event: NewEvent): string {
    const id = `msg_${randomUUID()}`;
    const now = new Date();
    const payload = JSON.stringify({ type: event.type, timestamp: now.toISOString(), data: event.data });
    this.insert.run({
      id,
      type: event.type,
      url: event.url,
      payload,
      ordering_key: event.orderingKey ?? null,
      next_attempt_at: now.getTime(),
      created_at: now.toISOString(),
    });
    return id;
  }

  /** How many events are in each state (a state without events is left out). */
  countByState(): Record<string, number> {
    return Object.fromEntries(
      (this.byState.all() as { state: EventState; n: number }[]).map((r) => [r.state, r.n]),
    );
  }

  get(id: string): OutboxEvent | undefined {
    return this.byId.get(id) as OutboxEvent | undefined;
  }

  /** Every attempt of the event, oldest first. */
  attempts(id: string): OutboxAttempt[] {
    return this.attemptsOfIds.all(JSON.stringify([id])).map((row) => {
      const { event_id: _, ...attempt } = row as OutboxAttempt & { event_id: string };
      return attempt;
    });
  }

  /** Events, newest first, with every attempt of each (oldest attempt first). */
  list(filter: EventFilter): { event: OutboxEvent; attempts: OutboxAttempt[] }[] {
    const events = this.listed.all({
      state: filter.state ?? null,
      type: filter.type ?? null,
      limit: filter.limit,
    }) as OutboxEvent[];
    const byEvent = new Map<string, OutboxAttempt[]>(events.map((e) => [e.id, []]));
    const rows = this.attemptsOfIds.all(JSON.stringify(events.map((e) => e.id))) as (OutboxAttempt & {
      event_id: string;
    })[];
    for (const { event_id, ...attempt } of rows) byEvent.get(event_id)?.push(attempt);
    return events.map((event) => ({ event, attempts: byEvent.get(event.id) ?? [] }));
  }

  /**
   * Sends a delivered or dead event again: same id (the receiver's idempotency key) and body, pending now,
   * with the whole retry schedule ahead of it. An event still pending is left to its schedule.
   */
  redeliver(id: string): RedeliverResult {
    const now = new Date();
    const changed = this.markRedelivered.run({ id, now: now.getTime(), at: now.toISOString() }).changes;
    const event = this.get(id);
    if (!event) return { ok: false, reason: "not_found" };
    if (changed === 0) return { ok: false, reason: "pending", event };
    this.kick();
    return { ok: true, event };
  }

  /**
   * Starts one attempt now, outside the worker's schedule; it ends within `timeoutMs`. The attempt never
   * rejects: a failure is recorded and the event stays with the worker's schedule. close() waits for it.
   */
  async deliverNow(id: string, timeoutMs: number): Promise<boolean> {
    const ev = this.get(id);
    if (!ev) return false;
    if (ev.state !== "pending") return ev.state === "delivered";
    if (!this.mayStart(ev)) return false;
    const attempt = this.attemptLogged(ev, timeoutMs);
    this.firstAttempts.add(attempt);
    void attempt.then(() => {
      this.firstAttempts.delete(attempt);
      // Later events of its key may have been written meanwhile and wait for this one: the worker takes them.
      if (ev.ordering_key) this.schedule(0);
    });
    return attempt;
  }

  /** Wakes the worker, e.g. after events were written. */
  kick(): void {
    this.schedule(0);
  }

  start(): void {
    this.closed = false;
    this.schedule(0);
  }

  /** Stops the worker and waits (bounded) for attempts in flight; pending events stay for the next start. */
  async close(waitMs = 5000): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await settledWithin(Promise.allSettled([...this.running, ...this.firstAttempts]), waitMs);
  }

  /** Arms the worker's timer for `delayMs` from now, unless it is already armed to fire sooner. */
  private schedule(delayMs: number): void {
    if (this.closed) return;
    const wait = Math.max(0, Math.min(delayMs, 60_000));
    const at = Date.now() + wait;
    if (this.timer && this.timerAt <= at) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => this.tick(), wait);
    this.timer.unref();
  }

  private tick(): void {
    this.timer = undefined;
    if (this.closed) return;
    for (const ev of this.due.all(Date.now()) as OutboxEvent[]) {
      if (this.running.size >= this.concurrency) break;
      if (!this.mayStart(ev)) continue;
      const p = this.attemptLogged(ev, this.opts.timeoutMs).then(() => undefined);
      this.running.add(p);
      void p.finally(() => {
        this.running.delete(p);
        this.schedule(0);
      });
    }
    const next = (this.earliest.get() as { at: number | null }).at;
    // Due events that could not start (ordering, concurrency) are woken by a completion; the poll is a fallback.
    if (next !== null) this.schedule(next > Date.now() ? next - Date.now() : 1000);
  }

  /** An event starts when no attempt of it, nor of an earlier event with its ordering key, is under way. */
  private mayStart(ev: OutboxEvent): boolean {
    if (this.inFlight.has(ev.id)) return false;
    if (!ev.ordering_key) return true;
    return !this.keysInFlight.has(ev.ordering_key) && !this.blockedByEarlier.get(ev.ordering_key, ev.id);
  }

  private nextDelayMs(attempts: number, retryAfterSeconds: number | undefined): number | undefined {
    const base = this.opts.retryScheduleSeconds[attempts - 1];
    if (base === undefined) return undefined;
    const jittered = base * (0.8 + Math.random() * 0.4);
    const wait = Math.max(jittered, Math.min(retryAfterSeconds ?? 0, 86_400));
    return Math.round(wait * 1000);
  }

  /**
   * An attempt that never rejects. Nobody awaits an attempt at once (the worker's are fire-and-forget, a first
   * attempt runs beside the change it reports), so a rejection would surface as unhandled and stop the agent;
   * and a change must not fail over the bookkeeping of its callback. A failure to record the attempt is
   * logged and the event stays pending, to be tried again.
   */
  private attemptLogged(ev: OutboxEvent, timeoutMs: number): Promise<boolean> {
    return this.attempt(ev, timeoutMs).catch((err: unknown) => {
      this.opts.log.error(
        { err, event: ev.id },
        "a delivery attempt could not be recorded; the event stays pending",
      );
      return false;
    });
  }

  private async attempt(ev: OutboxEvent, timeoutMs: number): Promise<boolean> {
    this.inFlight.add(ev.id);
    if (ev.ordering_key) this.keysInFlight.add(ev.ordering_key);
    const attemptNo = ev.attempts + 1;
    const started = new Date();
    const timestamp = Math.floor(started.getTime() / 1000);
    let statusCode: number | null = null;
    let error: string | null = null;
    let retryAfter: number | undefined;
    try {
      const res = await guardedPost(
        new URL(ev.url),
        ev.payload,
        {
          "content-type": "application/json",
          "user-agent": "hostkeeper-webhooks/1",
          "webhook-id": ev.id,
          "webhook-timestamp": String(timestamp),
          "webhook-signature": signWebhook(this.opts.secret, ev.id, timestamp, ev.payload),
        },
        { deny: this.opts.deny, timeoutMs },
      );
      statusCode = res.status;
      retryAfter = res.retryAfterSeconds;
      if (res.status < 200 || res.status >= 300)
        error = `HTTP ${res.status}${res.bodySnippet ? `: ${res.bodySnippet.slice(0, 200)}` : ""}`;
    } catch (err) {
      error = (err as Error).message || String(err);
    } finally {
      this.inFlight.delete(ev.id);
      if (ev.ordering_key) this.keysInFlight.delete(ev.ordering_key);
    }
    const ok = error === null;
    // 410 Gone: the receiver says it will never want this; stop without exhausting the schedule.
    const delay =
      ok || statusCode === 410 ? undefined : this.nextDelayMs(attemptNo - ev.schedule_offset, retryAfter);
    const state: EventState = ok ? "delivered" : delay === undefined ? "dead" : "pending";
    this.db.transaction(() => {
      this.recordAttempt.run(
        ev.id,
        attemptNo,
        started.toISOString(),
        Date.now() - started.getTime(),
        statusCode,
        error,
      );
      this.updateAfterAttempt.run({
        id: ev.id,
        attempts: attemptNo,
        state,
        next_attempt_at: delay === undefined ? ev.next_attempt_at : Date.now() + delay,
        delivered_at: ok ? new Date().toISOString() : null,
        last_error: error,
      });
    })();
    const outcome: AttemptOutcome = ok
      ? "delivered"
      : statusCode === 410
        ? "gone"
        : state === "dead"
          ? "dead"
          : "failed";
    this.opts.metrics?.deliveryAttempts.inc({ outcome });
    if (ok) this.opts.log.debug({ event: ev.id, type: ev.type, attempt: attemptNo }, "callback delivered");
    else
      this.opts.log.warn(
        { event: ev.id, type: ev.type, attempt: attemptNo, error, state },
        state === "dead" ? "callback dead-lettered" : "callback attempt failed; will retry",
      );
    if (!ok && state === "pending") this.schedule(delay ?? 0);
    return ok;
  }
}
