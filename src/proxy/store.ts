import type { Db, Migration } from "../store/db.js";
import type { ChangeOperation, HistoryOutcome } from "./schemas.js";

export const proxyMigrations: Migration[] = [
  {
    name: "proxy.001_route_changes",
    sql: `
      CREATE TABLE route_changes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        operation TEXT NOT NULL CHECK (operation IN ('create', 'replace', 'delete', 'put')),
        route_id TEXT NOT NULL,
        previous TEXT,
        requested TEXT,
        requested_at TEXT NOT NULL,
        finished_at TEXT,
        outcome TEXT NOT NULL CHECK (outcome IN ('pending', 'applied', 'refused', 'failed', 'rolled_back', 'rollback_failed')),
        error TEXT,
        event_id TEXT
      );
      CREATE INDEX route_changes_route ON route_changes (route_id, id);`,
  },
  {
    // SQLite cannot widen a CHECK in place: the table is rebuilt (ids kept, so history and restores that
    // name them stay right) to take restores, the caller's request id and the route_change event.
    name: "proxy.002_history_and_restore",
    sql: `
      CREATE TABLE route_changes_v2 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        operation TEXT NOT NULL CHECK (operation IN ('create', 'replace', 'delete', 'put', 'restore')),
        route_id TEXT NOT NULL,
        previous TEXT,
        requested TEXT,
        requested_at TEXT NOT NULL,
        finished_at TEXT,
        outcome TEXT NOT NULL CHECK (outcome IN ('pending', 'applied', 'refused', 'failed', 'rolled_back', 'rollback_failed')),
        error TEXT,
        event_id TEXT,
        request_id TEXT,
        restored_from INTEGER,
        change_event_id TEXT
      );
      INSERT INTO route_changes_v2
          (id, operation, route_id, previous, requested, requested_at, finished_at, outcome, error, event_id)
        SELECT id, operation, route_id, previous, requested, requested_at, finished_at, outcome, error, event_id
        FROM route_changes;
      -- Ids are never given twice (AUTOINCREMENT): the new table goes on from the old one's high-water mark.
      DELETE FROM sqlite_sequence WHERE name = 'route_changes_v2';
      INSERT INTO sqlite_sequence (name, seq)
        SELECT 'route_changes_v2', seq FROM sqlite_sequence WHERE name = 'route_changes';
      DROP TABLE route_changes;
      ALTER TABLE route_changes_v2 RENAME TO route_changes;
      CREATE INDEX route_changes_route ON route_changes (route_id, id);`,
  },
];

/** How a change that reached its end is recorded. */
export type SettledOutcome = Exclude<HistoryOutcome, "pending" | "interrupted">;

/** A row of `route_changes`. */
export interface ChangeRow {
  id: number;
  operation: ChangeOperation;
  route_id: string;
  /** JSON of the route as Caddy held it before the change; null when there was none. */
  previous: string | null;
  /** JSON of the route the change writes; null for a removal. */
  requested: string | null;
  requested_at: string;
  finished_at: string | null;
  outcome: SettledOutcome | "pending";
  error: string | null;
  event_id: string | null;
  request_id: string | null;
  restored_from: number | null;
  change_event_id: string | null;
}

/** What a change's record holds when it is first written, before Caddy is touched. */
export interface NewChange {
  operation: ChangeOperation;
  route_id: string;
  previous: string | null;
  requested: string | null;
  requested_at: string;
  request_id: string | null;
  restored_from: number | null;
}

/** The route changes the agent made: the state each captured, what it wrote, how it ended, its events. */
export class RouteChangeStore {
  private readonly insertChange;
  private readonly updatePrevious;
  private readonly setBackupEvent;
  private readonly finishChange;
  private readonly setChangeEvent;
  private readonly changeById;
  private readonly changesOf;
  private readonly anyChangeOf;
  /** Runs a function in a transaction, or in a savepoint when one is open: built once, not per call. */
  private readonly inTransaction;

  constructor(db: Db) {
    this.inTransaction = db.transaction(<T>(fn: () => T): T => fn());
    this.insertChange = db.prepare(
      `INSERT INTO route_changes (operation, route_id, previous, requested, requested_at, outcome, request_id, restored_from)
       VALUES (@operation, @route_id, @previous, @requested, @requested_at, 'pending', @request_id, @restored_from)`,
    );
    this.updatePrevious = db.prepare("UPDATE route_changes SET previous = ? WHERE id = ?");
    this.setBackupEvent = db.prepare("UPDATE route_changes SET event_id = ? WHERE id = ?");
    this.finishChange = db.prepare(
      "UPDATE route_changes SET outcome = ?, error = ?, finished_at = ? WHERE id = ?",
    );
    this.setChangeEvent = db.prepare("UPDATE route_changes SET change_event_id = ? WHERE id = ?");
    this.changeById = db.prepare("SELECT * FROM route_changes WHERE id = ?");
    this.changesOf = db.prepare("SELECT * FROM route_changes WHERE route_id = ? ORDER BY id DESC LIMIT ?");
    this.anyChangeOf = db.prepare("SELECT 1 FROM route_changes WHERE route_id = ? LIMIT 1");
  }

  /**
   * Runs `fn` in one transaction: a record and the event written with it land together or not at all.
   * Inside another one it is a savepoint of it: it is undone alone when `fn` throws, and lands with the
   * outer transaction.
   */
  transaction<T>(fn: () => T): T {
    return this.inTransaction(fn) as T;
  }

  /** Writes a pending change; returns its id. */
  insert(change: NewChange): number {
    return Number(this.insertChange.run(change).lastInsertRowid);
  }

  setPrevious(id: number, previous: string | null): void {
    this.updatePrevious.run(previous, id);
  }

  setBackupEventId(id: number, eventId: string): void {
    this.setBackupEvent.run(eventId, id);
  }

  finish(id: number, outcome: SettledOutcome, error: string | null, finishedAt: string): void {
    this.finishChange.run(outcome, error, finishedAt, id);
  }

  setChangeEventId(id: number, eventId: string): void {
    this.setChangeEvent.run(eventId, id);
  }

  byId(id: number): ChangeRow | undefined {
    return this.changeById.get(id) as ChangeRow | undefined;
  }

  /** The route's changes, newest first. */
  ofRoute(routeId: string, limit: number): ChangeRow[] {
    return this.changesOf.all(routeId, limit) as ChangeRow[];
  }

  hasAny(routeId: string): boolean {
    return this.anyChangeOf.get(routeId) !== undefined;
  }
}
