import type { Db, Migration } from "../store/db.js";
import type { Headers } from "./protocol.js";

export const connectMigrations: Migration[] = [
  {
    name: "connect.001_replay",
    sql: `
      CREATE TABLE connect_replay (
        peer TEXT NOT NULL,
        id TEXT NOT NULL,
        method TEXT NOT NULL,
        path TEXT NOT NULL,
        status INTEGER,
        headers TEXT,
        body BLOB,
        at INTEGER NOT NULL,
        PRIMARY KEY (peer, id)
      );
      CREATE INDEX connect_replay_at ON connect_replay (at);
    `,
  },
];

/** A change's first run as kept: its answer, or none (`status` null) when it ended without one. */
export interface ReplayRow {
  method: string;
  path: string;
  status: number | null;
  headers: Headers | null;
  body: Buffer | null;
  at: number;
}

interface Row {
  method: string;
  path: string;
  status: number | null;
  headers: string | null;
  body: Buffer | null;
  at: number;
}

/**
 * The changes' answers by control plane and request id, kept in the agent's database so that an agent
 * restarted (its own update, a crash) still answers a request sent again from its first run (connect/replay.ts).
 */
export class ReplayStore {
  private readonly insert;
  private readonly byKey;
  private readonly older;
  private readonly one;

  constructor(db: Db) {
    this.insert = db.prepare(
      `INSERT OR REPLACE INTO connect_replay (peer, id, method, path, status, headers, body, at)
       VALUES (@peer, @id, @method, @path, @status, @headers, @body, @at)`,
    );
    this.byKey = db.prepare(
      "SELECT method, path, status, headers, body, at FROM connect_replay WHERE peer = ? AND id = ?",
    );
    this.older = db.prepare("DELETE FROM connect_replay WHERE at < ?");
    this.one = db.prepare("DELETE FROM connect_replay WHERE peer = ? AND id = ?");
  }

  delete(peer: string, id: string): void {
    this.one.run(peer, id);
  }

  put(peer: string, id: string, row: ReplayRow): void {
    this.insert.run({
      peer,
      id,
      method: row.method,
      path: row.path,
      status: row.status,
      headers: row.headers === null ? null : JSON.stringify(row.headers),
      body: row.body,
      at: row.at,
    });
  }

  get(peer: string, id: string): ReplayRow | undefined {
    const r = this.byKey.get(peer, id) as Row | undefined;
    if (r === undefined) return undefined;
    return { ...r, headers: r.headers === null ? null : (JSON.parse(r.headers) as Headers) };
  }

  /** Forgets what was kept before `at` (ms since the epoch). */
  pruneBefore(at: number): void {
    this.older.run(at);
  }
}
