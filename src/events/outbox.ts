import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import type { Metrics } from "../metrics/metrics.js";
import type { Db } from "../store/db.js";
import { Periodic } from "../util/periodic.js";
import { settledWithin } from "../util/timers.js";
import { type AttemptResult, deliverSigned, type EventChannel } from "./delivery.js";
import { CallbackConnections, CONNECTION_CALLBACK, type DenyList } from "./egress.js";
import type { EventType } from "./event-kinds.js";
import { judgeAttempt, type Verdict } from "./retry-policy.js";
import {
  type AttemptRecord,
  type EventFilter,
  type OutboxAttempt,
  type OutboxEvent,
  OutboxStore,
} from "./store.js";

/** The longest the worker sleeps while an event is pending. */
const MAX_WAIT_MS = 60_000;

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
  /** The connection to the control plane, for events to CONNECTION_CALLBACK. */
  channel?: EventChannel | undefined;
}

export interface NewEvent {
  type: EventType;
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
  private readonly store: OutboxStore;
  private readonly inFlight = new Set<string>();
  private readonly keysInFlight = new Set<string>();
  /** The worker: a round starts the due deliveries, then waits until the next is due or it is woken. */
  private readonly worker: Periodic;
  private running = new Set<Promise<void>>();
  /** Attempts made by deliverNow, outside the worker's concurrency. */
  private readonly firstAttempts = new Set<Promise<boolean>>();
  /** The callbacks' kept-alive connections. */
  private readonly connections = new CallbackConnections();
  /** Attempts that ended and whose records wait for the next write of them (see `recorded`). */
  private unrecorded: { record: AttemptRecord; written: () => void; failed: (err: unknown) => void }[] = [];
  private readonly concurrency: number;

  constructor(
    db: Db,
    private readonly opts: OutboxOptions,
  ) {
    this.store = new OutboxStore(db);
    this.concurrency = opts.concurrency ?? 4;
    this.worker = new Periodic({
      // The longest wait, and the one after a round that failed.
      intervalMs: MAX_WAIT_MS,
      round: () => this.tick(),
      what: "starting the due deliveries",
      log: opts.log,
    });
    // Events written before `start` are delivered as soon as they are kicked.
    this.worker.start();
  }

  /** Writes an event; call inside the transaction that records the change it reports. Returns its id. */
  add(event: NewEvent): string {
    const id = `msg_${randomUUID()}`;
    const now = new Date();
    const payload = JSON.stringify({ type: event.type, timestamp: now.toISOString(), data: event.data });
    this.store.add({
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
    return this.store.countByState();
  }

  get(id: string): OutboxEvent | undefined {
    return this.store.get(id);
  }

  /** Every attempt of the event, oldest first. */
  attempts(id: string): OutboxAttempt[] {
    return this.store.attempts(id);
  }

  /** Events, newest first, with every attempt of each (oldest attempt first). */
  list(filter: EventFilter): { event: OutboxEvent; attempts: OutboxAttempt[] }[] {
    return this.store.list(filter);
  }

  /**
   * Sends a delivered or dead event again: same id (the receiver's idempotency key) and body, pending now,
   * with the whole retry schedule ahead of it. An event still pending is left to its schedule.
   */
  redeliver(id: string): RedeliverResult {
    const changed = this.store.redeliver(id, new Date());
    const event = this.get(id);
    if (!event) return { ok: false, reason: "not_found" };
    if (!changed) return { ok: false, reason: "pending", event };
    this.kick();
    return { ok: true, event };
  }

  /** The events waiting for the connection are tried now (it came back), not at their next scheduled attempt. */
  connectionRestored(): void {
    if (this.store.dueNowTo(CONNECTION_CALLBACK, Date.now()) > 0) this.kick();
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
    this.schedule(0);
  }

  /** Stops the worker and waits (bounded) for attempts in flight; pending events stay for the next start. */
  async close(waitMs = 5000): Promise<void> {
    await this.worker.stop();
    await settledWithin(Promise.allSettled([...this.running, ...this.firstAttempts]), waitMs);
    this.connections.closeIdle();
  }

  /** Wakes the worker within `delayMs`, unless it is already due sooner. */
  private schedule(delayMs: number): void {
    this.worker.soon(delayMs);
  }

  /** Starts the due deliveries; answers the wait until the next one is due (none: until woken). */
  private tick(): number {
    for (const ev of this.store.dueBy(Date.now())) {
      if (this.running.size >= this.concurrency) break;
      if (!this.mayStart(ev)) continue;
      const p = this.attemptLogged(ev, this.opts.timeoutMs).then(() => undefined);
      this.running.add(p);
      void p.finally(() => {
        this.running.delete(p);
        this.schedule(0);
      });
    }
    const next = this.store.earliestDue();
    // Due events that could not start (ordering, concurrency) are woken by a completion; the poll is a fallback.
    if (next === null) return Number.POSITIVE_INFINITY;
    return Math.min(next > Date.now() ? next - Date.now() : 1000, MAX_WAIT_MS);
  }

  /** An event starts when no attempt of it, nor of an earlier event with its ordering key, is under way. */
  private mayStart(ev: OutboxEvent): boolean {
    if (this.inFlight.has(ev.id)) return false;
    if (!ev.ordering_key) return true;
    return !this.keysInFlight.has(ev.ordering_key) && !this.store.hasEarlierPending(ev.ordering_key, ev.id);
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

  /**
   * One attempt: sent and recorded while its event and ordering key are marked in flight (a tick of the
   * worker between the two would find the event still pending and due), then counted and logged.
   */
  private async attempt(ev: OutboxEvent, timeoutMs: number): Promise<boolean> {
    this.inFlight.add(ev.id);
    if (ev.ordering_key) this.keysInFlight.add(ev.ordering_key);
    const attemptNo = ev.attempts + 1;
    const started = new Date();
    const { secret, deny, channel } = this.opts;
    const connections = this.connections;
    let result: AttemptResult;
    let verdict: Verdict;
    try {
      result = await deliverSigned(ev, { secret, deny, timeoutMs, connections, channel });
      verdict = judgeAttempt(result, attemptNo - ev.schedule_offset, this.opts.retryScheduleSeconds);
      await this.recorded({
        eventId: ev.id,
        attempt: attemptNo,
        started,
        durationMs: Date.now() - started.getTime(),
        statusCode: result.statusCode,
        error: result.error,
        state: verdict.state,
        nextAttemptAt: verdict.delayMs === undefined ? ev.next_attempt_at : Date.now() + verdict.delayMs,
        deliveredAt: verdict.state === "delivered" ? new Date().toISOString() : null,
      });
    } finally {
      this.inFlight.delete(ev.id);
      if (ev.ordering_key) this.keysInFlight.delete(ev.ordering_key);
    }
    const { state, delayMs, outcome } = verdict;
    const ok = state === "delivered";
    this.opts.metrics?.deliveryAttempts.inc({ outcome });
    if (ok) this.opts.log.debug({ event: ev.id, type: ev.type, attempt: attemptNo }, "callback delivered");
    else
      this.opts.log.warn(
        { event: ev.id, type: ev.type, attempt: attemptNo, error: result.error, state },
        state === "dead" ? "callback dead-lettered" : "callback attempt failed; will retry",
      );
    if (state === "pending") this.schedule(delayMs ?? 0);
    return ok;
  }

  /**
   * Writes an attempt's record with those of the other attempts that end in the same turn of the event
   * loop, in one transaction: a burst of changes ends its attempts a few at a time, and a commit is what an
   * attempt's record costs most. Resolves once the record is written.
   */
  private recorded(record: AttemptRecord): Promise<void> {
    return new Promise((written, failed) => {
      if (this.unrecorded.length === 0) setImmediate(() => this.writeRecords());
      this.unrecorded.push({ record, written, failed });
    });
  }

  /** The waiting records in one transaction; when that fails, one each, so a record that cannot be written fails alone. */
  private writeRecords(): void {
    const batch = this.unrecorded.splice(0);
    try {
      this.store.recordAttempts(batch.map((b) => b.record));
      for (const b of batch) b.written();
      return;
    } catch {
      // Rolled back: each on its own below.
    }
    for (const b of batch)
      try {
        this.store.recordAttempts([b.record]);
        b.written();
      } catch (err) {
        b.failed(err);
      }
  }
}
