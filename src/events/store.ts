import type { Db, Migration } from "../store/db.js";
import type { EventState, EventType } from "./event-kinds.js";

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

export interface OutboxEvent {
  id: string;
  type: EventType;
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
  type?: EventType;
  limit: number;
}

/** A new row, pending from `next_attempt_at` (ms since the epoch). */
export type NewEventRow = Pick<
  OutboxEvent,
  "id" | "type" | "url" | "payload" | "ordering_key" | "next_attempt_at" | "created_at"
>;

/** An attempt's record and what it leaves in its event's row. */
export interface AttemptRecord {
  eventId: string;
  attempt: number;
  started: Date;
  /** How long the attempt took, measured when it ended (its record may be written a moment later). */
  durationMs: number;
  statusCode: number | null;
  error: string | null;
  state: EventState;
  nextAttemptAt: number;
  deliveredAt: string | null;
}

type AttemptRow = OutboxAttempt & { event_id: string };

/** The outbox's two tables: events and every attempt of each. */
export class OutboxStore {
  private readonly insert;
  private readonly due;
  private readonly earliest;
  private readonly blockedByEarlier;
  private readonly recordAttempt;
  private readonly updateAfterAttempt;
  private readonly byId;
  private readonly dueNow;
  private readonly listed;
  private readonly attemptsOfIds;
  private readonly markRedelivered;
  private readonly byState;
  private readonly recordAll: (records: readonly AttemptRecord[]) => void;

  constructor(db: Db) {
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
    this.dueNow = db.prepare(
      "UPDATE outbox_events SET next_attempt_at = ? WHERE state = 'pending' AND url = ? AND next_attempt_at > ?",
    );
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
    this.recordAll = db.transaction((records: readonly AttemptRecord[]) => {
      for (const r of records) this.recordOne(r);
    });
  }

  add(row: NewEventRow): void {
    this.insert.run(row);
  }

  get(id: string): OutboxEvent | undefined {
    return this.byId.get(id) as OutboxEvent | undefined;
  }

  /** How many events are in each state (a state without events is left out). */
  countByState(): Record<string, number> {
    return Object.fromEntries(
      (this.byState.all() as { state: EventState; n: number }[]).map((r) => [r.state, r.n]),
    );
  }

  /** Every attempt of the event, oldest first. */
  attempts(id: string): OutboxAttempt[] {
    return this.attemptsOfIds.all(JSON.stringify([id])).map((row) => {
      const { event_id: _, ...attempt } = row as AttemptRow;
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
    const rows = this.attemptsOfIds.all(JSON.stringify(events.map((e) => e.id))) as AttemptRow[];
    for (const { event_id, ...attempt } of rows) byEvent.get(event_id)?.push(attempt);
    return events.map((event) => ({ event, attempts: byEvent.get(event.id) ?? [] }));
  }

  /** Puts a delivered or dead event back to pending, due at `now`; false when it is pending or unknown. */
  redeliver(id: string, now: Date): boolean {
    return this.markRedelivered.run({ id, now: now.getTime(), at: now.toISOString() }).changes > 0;
  }

  /** Makes the pending events to `url` due at `now`; how many. */
  dueNowTo(url: string, now: number): number {
    return this.dueNow.run(now, url, now).changes;
  }

  /** Pending events due by `now`, the most overdue first (at most 64). */
  dueBy(now: number): OutboxEvent[] {
    return this.due.all(now) as OutboxEvent[];
  }

  /** When the earliest pending event is due (ms since the epoch); null when none is pending. */
  earliestDue(): number | null {
    return (this.earliest.get() as { at: number | null }).at;
  }

  /** Whether an event written before this one with the same ordering key is still pending. */
  hasEarlierPending(orderingKey: string, id: string): boolean {
    return this.blockedByEarlier.get(orderingKey, id) !== undefined;
  }

  /** Records attempts and updates their events, all in one transaction. */
  recordAttempts(records: readonly AttemptRecord[]): void {
    this.recordAll(records);
  }

  private recordOne(r: AttemptRecord): void {
    this.recordAttempt.run(
      r.eventId,
      r.attempt,
      r.started.toISOString(),
      r.durationMs,
      r.statusCode,
      r.error,
    );
    this.updateAfterAttempt.run({
      id: r.eventId,
      attempts: r.attempt,
      state: r.state,
      next_attempt_at: r.nextAttemptAt,
      delivered_at: r.deliveredAt,
      last_error: r.error,
    });
  }
}
