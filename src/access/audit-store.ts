import type { Db, Migration } from "../store/db.js";

export const auditMigrations: Migration[] = [
  {
    name: "audit.001_log",
    sql: `CREATE TABLE audit_log (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      at TEXT NOT NULL,
      token TEXT NOT NULL,
      remote_address TEXT NOT NULL,
      request_id TEXT NOT NULL,
      method TEXT NOT NULL,
      route TEXT NOT NULL,
      path TEXT NOT NULL,
      summary TEXT NOT NULL,
      outcome TEXT NOT NULL,
      status INTEGER,
      completed_at TEXT
    );
    CREATE INDEX audit_log_at ON audit_log (at);`,
  },
];

/**
 * `pending`: written, its request not finished. `succeeded` (2xx/3xx), `refused` (4xx), `failed` (5xx): the
 * status the client got. `aborted`: the connection closed before the answer was sent (the change may
 * still have happened). `interrupted`: the agent stopped (crash, kill) before the request finished; found
 * at the next start, when the record is completed so.
 */
export const AUDIT_OUTCOMES = [
  "pending",
  "succeeded",
  "refused",
  "failed",
  "aborted",
  "interrupted",
] as const;
export type AuditOutcome = (typeof AUDIT_OUTCOMES)[number];

/** A short description of what a mutation was asked to change; scalars only. */
export type AuditSummary = Record<string, string | number | boolean | null>;

export interface AuditStart {
  at: Date;
  token: string;
  remoteAddress: string;
  requestId: string;
  method: string;
  route: string;
  path: string;
  summary: AuditSummary;
}

export interface AuditRecord {
  id: number;
  at: string;
  completed_at: string | null;
  token: string;
  remote_address: string;
  request_id: string;
  method: string;
  route: string;
  path: string;
  status: number | null;
  outcome: AuditOutcome;
  summary: AuditSummary;
}

interface Row extends Omit<AuditRecord, "summary"> {
  summary: string;
}

export const outcomeOf = (status: number): "succeeded" | "refused" | "failed" =>
  status >= 500 ? "failed" : status >= 400 ? "refused" : "succeeded";

/** A write waiting for the next commit, and who learns how it went. */
interface Waiting {
  run: () => number;
  done: (id: number) => void;
  failed: (err: unknown) => void;
}

/**
 * The audit trail of mutating requests, in the agent's database. A record is written when the request is
 * authenticated, before any effect; it is completed with the answer's status, or as aborted. The writes that
 * arrive in one turn of the event loop are committed together on the next, and `begin` and `describe`
 * resolve once theirs is committed: the request waits for that before going on, so what was asked survives
 * a crash of the agent between record and effect, at one commit for many requests rather than three each.
 * Every read writes what is waiting first.
 */
export class AuditLog {
  private readonly insert;
  private readonly describeStmt;
  private readonly completeStmt;
  private readonly inTransaction;
  private waiting: Waiting[] = [];

  constructor(
    private readonly db: Db,
    private readonly now: () => number,
  ) {
    this.insert = db.prepare(
      `INSERT INTO audit_log (at, token, remote_address, request_id, method, route, path, summary, outcome)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending')`,
    );
    this.describeStmt = db.prepare("UPDATE audit_log SET summary = ? WHERE id = ?");
    this.completeStmt = db.prepare(
      "UPDATE audit_log SET outcome = ?, status = ?, completed_at = ? WHERE id = ? AND outcome = 'pending'",
    );
    this.inTransaction = db.transaction((writes: readonly Waiting[]) => writes.map((w) => w.run()));
  }

  /** Records left pending by an agent that stopped without finishing them; call before serving. */
  markInterrupted(): number {
    this.flush();
    return this.db
      .prepare("UPDATE audit_log SET outcome = 'interrupted', completed_at = ? WHERE outcome = 'pending'")
      .run(new Date(this.now()).toISOString()).changes;
  }

  /** Writes a pending record; resolves with its id once it is committed. */
  begin(r: AuditStart): Promise<number> {
    const row = [
      r.at.toISOString(),
      r.token,
      r.remoteAddress,
      r.requestId,
      r.method,
      r.route,
      r.path,
      JSON.stringify(r.summary),
    ];
    return this.write(() => Number(this.insert.run(...row).lastInsertRowid));
  }

  /** Replaces the summary (once the body has been read), still before the effect; resolves once committed. */
  async describe(id: number, summary: AuditSummary): Promise<void> {
    const text = JSON.stringify(summary);
    await this.write(() => this.describeStmt.run(text, id).changes);
  }

  /** The record's end; a record already completed keeps its first outcome. Written with the next commit. */
  complete(
    id: number,
    outcome: Exclude<AuditOutcome, "pending" | "interrupted">,
    status: number | null,
  ): void {
    const at = new Date(this.now()).toISOString();
    // A failure is the database's, which the next begin reports to its request.
    this.write(() => this.completeStmt.run(outcome, status, at, id).changes).catch(() => {});
  }

  /** Writes what is waiting, in one transaction; when that fails, each on its own, so a write that cannot be made fails alone. */
  flush(): void {
    const writes = this.waiting.splice(0);
    if (writes.length === 0) return;
    if (!this.db.open) {
      for (const w of writes) w.failed(new Error("the audit trail's database is closed"));
      return;
    }
    let results: number[];
    try {
      results = this.inTransaction(writes);
    } catch {
      for (const w of writes)
        try {
          w.done(w.run());
        } catch (err) {
          w.failed(err);
        }
      return;
    }
    writes.forEach((w, i) => {
      w.done(results[i] ?? 0);
    });
  }

  private write(run: () => number): Promise<number> {
    return new Promise((done, failed) => {
      if (this.waiting.length === 0) setImmediate(() => this.flush());
      this.waiting.push({ run, done, failed });
    });
  }

  /** Records at or after `since`, oldest first, at most `limit`. */
  list(opts: { since?: Date | undefined; limit: number }): AuditRecord[] {
    this.flush();
    const rows = this.db
      .prepare("SELECT * FROM audit_log WHERE at >= ? ORDER BY id LIMIT ?")
      .all(opts.since?.toISOString() ?? "", opts.limit) as Row[];
    return rows.map((r) => ({ ...r, summary: JSON.parse(r.summary) as AuditSummary }));
  }

  /** Deletes records older than `retentionMs`; returns how many. */
  prune(retentionMs: number): number {
    this.flush();
    const cutoff = new Date(this.now() - retentionMs).toISOString();
    return this.db.prepare("DELETE FROM audit_log WHERE at < ? AND outcome != 'pending'").run(cutoff).changes;
  }
}
