import { join } from "node:path";
import Database from "better-sqlite3";
import { fs } from "../util/node-builtins.js";

const { chmodSync, mkdirSync } = fs;

export type Db = Database.Database;

/** A schema change, applied once per database, identified by a name unique across areas (`proxy.001_backups`). */
export interface Migration {
  name: string;
  sql: string;
}

/**
 * Pages of the database SQLite keeps in the agent's memory, in KiB (SQLite's own default; better-sqlite3
 * builds it with 16,000). The agent appends changes, events and audit records, kept for days, and reads few
 * of them back, so a larger cache fills with pages written once and stays full, and the process keeps the
 * memory they took (glibc keeps the small allocations the pages are made of). Pages beyond it are read
 * through the system's page cache.
 */
export const DB_CACHE_KIB = 2000;

/**
 * Opens the agent's database in the data dir and applies the migrations it has not seen yet, each in its
 * own transaction. WAL with synchronous=NORMAL keeps a commit durable across a crash of the agent (not of the
 * machine's power) at a cost of microseconds, which is what an agent recording intent before acting needs.
 */
export function openDatabase(dataDir: string, migrations: readonly Migration[]): Db {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const path = join(dataDir, "hostkeeper.db");
  const db = new Database(path);
  chmodSync(path, 0o600);
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL");
  db.pragma("foreign_keys = ON");
  db.pragma("busy_timeout = 5000");
  db.pragma(`cache_size = -${DB_CACHE_KIB}`);
  db.exec("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)");
  const seen = new Set(
    (db.prepare("SELECT name FROM schema_migrations").all() as { name: string }[]).map((r) => r.name),
  );
  const record = db.prepare("INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)");
  for (const m of migrations) {
    if (seen.has(m.name)) continue;
    db.transaction(() => {
      db.exec(m.sql);
      record.run(m.name, new Date().toISOString());
    })();
  }
  return db;
}
