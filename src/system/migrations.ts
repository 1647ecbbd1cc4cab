import type { Migration } from "../store/db.js";
import { candidateMigrations } from "./candidates.js";

/** The system area's tables, in the order they were added (a name once applied never changes). */
export const systemMigrations: Migration[] = [
  {
    name: "system.001_applies",
    sql: `
      CREATE TABLE system_applies (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        request_id TEXT NOT NULL,
        requested_by TEXT NOT NULL,
        update_type TEXT NOT NULL CHECK (update_type IN ('security', 'full')),
        auto_reboot INTEGER NOT NULL,
        package_manager TEXT NOT NULL,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        duration_ms INTEGER,
        outcome TEXT NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed', 'interrupted')),
        error TEXT,
        result TEXT
      );`,
  },
  {
    name: "system.002_last_check",
    sql: `
      CREATE TABLE system_last_check (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        checked_at TEXT NOT NULL,
        package_manager TEXT NOT NULL,
        security_updates INTEGER NOT NULL,
        regular_updates INTEGER NOT NULL,
        reboot_required INTEGER NOT NULL
      );`,
  },
  {
    // An apply's state machine (what an async apply reports), with a history of states, the callback its
    // events go to, and what it planned, recovered and rebooted. Earlier rows get the state their outcome means.
    name: "system.003_apply_states",
    sql: `
      ALTER TABLE system_applies ADD COLUMN state TEXT NOT NULL DEFAULT 'completed';
      ALTER TABLE system_applies ADD COLUMN callback_url TEXT;
      ALTER TABLE system_applies ADD COLUMN progress TEXT;
      ALTER TABLE system_applies ADD COLUMN planned TEXT;
      ALTER TABLE system_applies ADD COLUMN recovery TEXT;
      ALTER TABLE system_applies ADD COLUMN reboot TEXT;
      ALTER TABLE system_applies ADD COLUMN reboot_at TEXT;
      ALTER TABLE system_applies ADD COLUMN updated_at TEXT;
      UPDATE system_applies SET state = CASE outcome WHEN 'failed' THEN 'failed'
        WHEN 'interrupted' THEN 'interrupted' WHEN 'running' THEN 'installing' ELSE 'completed' END,
        updated_at = COALESCE(finished_at, started_at);
      CREATE TABLE system_apply_states (
        apply_id INTEGER NOT NULL REFERENCES system_applies (id),
        seq INTEGER NOT NULL,
        state TEXT NOT NULL,
        at TEXT NOT NULL,
        PRIMARY KEY (apply_id, seq)
      );
      CREATE TABLE system_boots (
        boot_id TEXT PRIMARY KEY,
        seen_at TEXT NOT NULL,
        booted_at TEXT,
        kernel TEXT,
        previous_boot_id TEXT,
        planned_apply_id INTEGER
      );`,
  },
  {
    // Maintenance windows: the schedule (one), its slots' runs, and what started each apply (rows before it
    // were all started through the API).
    name: "system.004_schedule",
    sql: `
      ALTER TABLE system_applies ADD COLUMN trigger TEXT NOT NULL DEFAULT 'api'
        CHECK (trigger IN ('api', 'schedule'));
      CREATE TABLE system_schedule (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        schedule TEXT NOT NULL,
        set_at TEXT NOT NULL
      );
      CREATE TABLE system_schedule_runs (
        slot_start TEXT PRIMARY KEY,
        state TEXT NOT NULL
          CHECK (state IN ('running', 'completed', 'failed', 'interrupted', 'missed', 'refused')),
        apply_id INTEGER REFERENCES system_applies (id),
        reason TEXT,
        recorded_at TEXT NOT NULL
      );`,
  },
  {
    // A scheduled run is one record: a slot that has an apply is that apply (which carries its slot, and
    // whether the window left its reboot out); only the slots without one (claimed, missed, refused before
    // an apply, interrupted before it) keep a row of their own. Every run row moves: those with an apply
    // into it (the reason the window left the reboot out becomes the flag), the others into the new table,
    // whose states are the old table's so that no row can fail the move.
    name: "system.005_schedule_runs_in_applies",
    sql: `
      ALTER TABLE system_applies ADD COLUMN slot_start TEXT;
      ALTER TABLE system_applies ADD COLUMN reboot_left_out INTEGER NOT NULL DEFAULT 0;
      UPDATE system_applies SET
        slot_start = (SELECT r.slot_start FROM system_schedule_runs r WHERE r.apply_id = system_applies.id),
        reboot_left_out = EXISTS (SELECT 1 FROM system_schedule_runs r WHERE r.apply_id = system_applies.id
          AND r.reason = 'no reboot: it would have come after the end of the window')
        WHERE id IN (SELECT apply_id FROM system_schedule_runs);
      CREATE UNIQUE INDEX system_applies_slot ON system_applies (slot_start) WHERE slot_start IS NOT NULL;
      CREATE TABLE system_schedule_slots (
        slot_start TEXT PRIMARY KEY,
        state TEXT NOT NULL
          CHECK (state IN ('running', 'completed', 'failed', 'interrupted', 'missed', 'refused')),
        reason TEXT,
        recorded_at TEXT NOT NULL
      );
      INSERT INTO system_schedule_slots (slot_start, state, reason, recorded_at)
        SELECT slot_start, state, reason, recorded_at FROM system_schedule_runs WHERE apply_id IS NULL;
      DROP TABLE system_schedule_runs;`,
  },
  // When each candidate version was first seen, and since when a reboot is required (candidates.ts).
  ...candidateMigrations,
  {
    // The package name patterns an apply keeps out (packages/exclude.ts).
    name: "system.007_apply_exclude",
    sql: "ALTER TABLE system_applies ADD COLUMN exclude TEXT;",
  },
  {
    // The minimum ages of the versions an apply installs (candidates.ts `MinAge`).
    name: "system.008_apply_min_age",
    sql: "ALTER TABLE system_applies ADD COLUMN min_age TEXT;",
  },
  {
    // The host's hooks an apply ran (hooks/hooks.ts `HookRecord[]`).
    name: "system.009_apply_hooks",
    sql: "ALTER TABLE system_applies ADD COLUMN hooks TEXT;",
  },
];
