import type { Db } from "./db.js";

export interface StateHistoryTables<S extends string> {
  /** The updates' table: `id`, `state`, `updated_at`, `finished_at` and the fields a move sets. */
  table: string;
  /** Its history: `update_id`, `seq`, `state`, `at`. */
  history: string;
  final: ReadonlySet<S>;
}

/**
 * The states of an update, for the stores that keep updates (the operator's, the agent's own): the row
 * moved to a state (fields set with it, `finished_at` on a final one) and the move appended to its history,
 * in one transaction with what the store writes beside it (its event). Table names are the store's own
 * constants, never input.
 */
export class StateHistory<S extends string> {
  constructor(
    private readonly db: Db,
    private readonly t: StateHistoryTables<S>,
  ) {}

  /** Moves update `id` to `state`; `also` runs in the same transaction, given the move's time. */
  move(id: string, state: S, fields: Record<string, unknown>, also: (at: string) => void): void {
    const now = new Date().toISOString();
    const sets = [...Object.keys(fields).map((k) => `${k} = @${k}`), "state = @state", "updated_at = @now"];
    this.db.transaction(() => {
      this.db
        .prepare(`UPDATE ${this.t.table} SET ${sets.join(", ")}, finished_at = @finished WHERE id = @id`)
        .run({ ...fields, id, state, now, finished: this.t.final.has(state) ? now : null });
      this.append(id, state, now);
      also(now);
    })();
  }

  /** Appends a history entry; inside the caller's transaction (a new update's first state). */
  append(id: string, state: S, at: string): void {
    this.db
      .prepare(
        `INSERT INTO ${this.t.history} (update_id, seq, state, at) VALUES (?, (SELECT count(*) FROM ${this.t.history} WHERE update_id = ?), ?, ?)`,
      )
      .run(id, id, state, at);
  }

  /** Update `id`'s states, in order, with their times. */
  of(id: string): { state: S; at: string }[] {
    return this.db
      .prepare(`SELECT state, at FROM ${this.t.history} WHERE update_id = ? ORDER BY seq`)
      .all(id) as { state: S; at: string }[];
  }
}
