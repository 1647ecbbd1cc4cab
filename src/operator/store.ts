import type { Logger } from "pino";
import type { Outbox } from "../events/outbox.js";
import type { Metrics } from "../metrics/metrics.js";
import type { Db, Migration } from "../store/db.js";
import { StateHistory } from "../store/state-history.js";
import { UpdateNotFoundError } from "./errors.js";
import type { UpdateErrorCode } from "./failure.js";
import type { UpdateState, UpdateStatus } from "./schemas.js";

export const operatorMigrations: Migration[] = [
  {
    name: "operator.001_updates_and_slots",
    sql: `
      CREATE TABLE operator_updates (
        id TEXT PRIMARY KEY,
        request TEXT NOT NULL,
        version TEXT NOT NULL,
        callback_url TEXT NOT NULL,
        artifact_source TEXT NOT NULL,
        artifact_url TEXT,
        checksum TEXT,
        state TEXT NOT NULL,
        bytes_done INTEGER NOT NULL DEFAULT 0,
        bytes_total INTEGER,
        previous_slot TEXT,
        previous_version TEXT,
        new_slot TEXT,
        error_code TEXT,
        error_message TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        finished_at TEXT
      );
      -- At most one unfinished update, whatever the code above it does.
      CREATE UNIQUE INDEX operator_updates_one_running ON operator_updates ((finished_at IS NULL))
        WHERE finished_at IS NULL;
      CREATE TABLE operator_update_states (
        update_id TEXT NOT NULL REFERENCES operator_updates (id),
        seq INTEGER NOT NULL,
        state TEXT NOT NULL,
        at TEXT NOT NULL,
        PRIMARY KEY (update_id, seq)
      );
      CREATE TABLE operator_slots (
        slot TEXT PRIMARY KEY CHECK (slot IN ('blue', 'green')),
        version TEXT,
        update_id TEXT,
        port INTEGER,
        pid INTEGER,
        proc_start TEXT,
        started_at TEXT,
        active INTEGER NOT NULL DEFAULT 0
      );
      INSERT INTO operator_slots (slot) VALUES ('blue'), ('green');`,
  },
  {
    // The minisign signature that authenticated an update's artifact (with HOSTKEEPER_OPERATOR_TRUSTED_KEYS).
    name: "operator.002_signature",
    sql: `
      ALTER TABLE operator_updates ADD COLUMN signature_key_id TEXT;
      ALTER TABLE operator_updates ADD COLUMN signature_file TEXT;
      ALTER TABLE operator_updates ADD COLUMN signature_comment TEXT;`,
  },
];

export type Slot = "blue" | "green";
export const otherSlot = (s: Slot): Slot => (s === "blue" ? "green" : "blue");

export interface SlotRow {
  slot: Slot;
  /** Version of the executable in the slot's folder, and the update that put it there. */
  version: string | null;
  update_id: string | null;
  /** The running process (leader of its own process group), identified by PID and kernel start time. */
  port: number | null;
  pid: number | null;
  proc_start: string | null;
  started_at: string | null;
  /** 1 for the slot the operator's route points at. */
  active: number;
}

export interface ProcessRecord {
  pid: number;
  procStart: string;
  startedAt: string;
  port: number;
}

export interface UpdateRow {
  id: string;
  request: string;
  version: string;
  callback_url: string;
  artifact_source: string;
  artifact_url: string | null;
  checksum: string | null;
  signature_key_id: string | null;
  signature_file: string | null;
  signature_comment: string | null;
  state: UpdateState;
  bytes_done: number;
  bytes_total: number | null;
  previous_slot: Slot | null;
  previous_version: string | null;
  new_slot: Slot | null;
  error_code: UpdateErrorCode | null;
  error_message: string | null;
  created_at: string;
  updated_at: string;
  finished_at: string | null;
}

const TERMINAL: ReadonlySet<UpdateState> = new Set(["completed", "failed", "rolled_back"]);

type UpdateFields = Partial<
  Pick<
    UpdateRow,
    | "artifact_url"
    | "checksum"
    | "signature_key_id"
    | "signature_file"
    | "signature_comment"
    | "previous_slot"
    | "previous_version"
    | "new_slot"
    | "error_code"
    | "error_message"
  >
>;

const statusPath = (id: string) => `/v1/operator/update/${encodeURIComponent(id)}`;

/**
 * The operator area's persistent state: update processes with their history of states, and the two
 * instance slots. Every state change is one transaction that also writes the `operator_update` event, so a
 * callback exists exactly when the change it reports does.
 */
export class OperatorStore {
  private readonly states: StateHistory<UpdateState>;

  constructor(
    private readonly db: Db,
    private readonly outbox: Outbox,
    private readonly log: Logger,
    /** Counts updates by the final state they reach. */
    private readonly metrics?: Metrics,
  ) {
    this.states = new StateHistory(db, {
      table: "operator_updates",
      history: "operator_update_states",
      final: TERMINAL,
    });
  }

  slot(slot: Slot): SlotRow {
    return this.db.prepare("SELECT * FROM operator_slots WHERE slot = ?").get(slot) as SlotRow;
  }

  slots(): SlotRow[] {
    return this.db.prepare("SELECT * FROM operator_slots ORDER BY slot").all() as SlotRow[];
  }

  active(): SlotRow | undefined {
    return this.db.prepare("SELECT * FROM operator_slots WHERE active = 1").get() as SlotRow | undefined;
  }

  setActive(slot: Slot | null): void {
    this.db.prepare("UPDATE operator_slots SET active = (slot IS ?)").run(slot);
  }

  /** A new executable is in the slot's folder (any process of the slot is already stopped). */
  setInstalled(slot: Slot, version: string, updateId: string): void {
    this.db
      .prepare(
        "UPDATE operator_slots SET version = ?, update_id = ?, pid = NULL, proc_start = NULL WHERE slot = ?",
      )
      .run(version, updateId, slot);
  }

  setProcess(slot: Slot, p: ProcessRecord): void {
    this.db
      .prepare("UPDATE operator_slots SET pid = ?, proc_start = ?, started_at = ?, port = ? WHERE slot = ?")
      .run(p.pid, p.procStart, p.startedAt, p.port, slot);
  }

  /** Marks the slot's process `pid` gone; a process started in the slot since is left recorded. */
  clearProcess(slot: Slot, pid: number): void {
    this.db
      .prepare("UPDATE operator_slots SET pid = NULL, proc_start = NULL WHERE slot = ? AND pid = ?")
      .run(slot, pid);
  }

  /** The update with this id, if there is one. */
  find(id: string): UpdateRow | undefined {
    return this.db.prepare("SELECT * FROM operator_updates WHERE id = ?").get(id) as UpdateRow | undefined;
  }

  /** The update with this id; an id no update has is an `UpdateNotFoundError`. */
  get(id: string): UpdateRow {
    const row = this.find(id);
    if (row === undefined) throw new UpdateNotFoundError(id);
    return row;
  }

  /** The unfinished update, if any. */
  running(): UpdateRow | undefined {
    return this.db.prepare("SELECT * FROM operator_updates WHERE finished_at IS NULL").get() as
      | UpdateRow
      | undefined;
  }

  /** Records a new update in state `queued` (with its event). */
  create(
    u: Pick<UpdateRow, "id" | "request" | "version" | "callback_url" | "artifact_source" | "checksum">,
  ): UpdateRow {
    const now = new Date().toISOString();
    this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT INTO operator_updates (id, request, version, callback_url, artifact_source, checksum, state, created_at, updated_at)
           VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?)`,
        )
        .run(u.id, u.request, u.version, u.callback_url, u.artifact_source, u.checksum, now, now);
      this.states.append(u.id, "queued", now);
      this.addEvent(u.id);
    })();
    this.log.info(
      { update_process_id: u.id, state: "queued", version: u.version, artifact_source: u.artifact_source },
      `operator update ${u.id}: queued`,
    );
    this.outbox.kick();
    return this.get(u.id);
  }

  /** Moves an update to `state` (setting `fields` too), with its history entry and its event. */
  transition(id: string, state: UpdateState, fields: UpdateFields = {}): UpdateRow {
    this.states.move(id, state, fields, () => this.addEvent(id));
    if (TERMINAL.has(state)) this.metrics?.operatorUpdates.inc({ state });
    this.outbox.kick();
    const row = this.get(id);
    // One line per state change, where the state is recorded, so no path through the update can skip it.
    const line = {
      update_process_id: id,
      state,
      version: row.version,
      ...(row.error_code === null ? {} : { error_code: row.error_code, error: row.error_message }),
    };
    if (state === "failed" || state === "rolled_back") this.log.warn(line, `operator update ${id}: ${state}`);
    else this.log.info(line, `operator update ${id}: ${state}`);
    return row;
  }

  /** Records why an update is being undone, before the undoing starts (so a restart carries it on). */
  setError(id: string, code: UpdateErrorCode, message: string): void {
    this.db
      .prepare("UPDATE operator_updates SET error_code = ?, error_message = ?, updated_at = ? WHERE id = ?")
      .run(code, message, new Date().toISOString(), id);
  }

  setProgress(id: string, done: number, total: number | undefined): void {
    this.db
      .prepare("UPDATE operator_updates SET bytes_done = ?, bytes_total = ? WHERE id = ?")
      .run(done, total ?? null, id);
  }

  status(row: UpdateRow): UpdateStatus {
    const history = this.states.of(row.id);
    return {
      update_process_id: row.id,
      version: row.version,
      state: row.state,
      artifact_source: row.artifact_source,
      artifact_url: row.artifact_url,
      progress: { bytes_downloaded: row.bytes_done, bytes_total: row.bytes_total },
      previous_instance:
        row.previous_slot === null ? null : { slot: row.previous_slot, version: row.previous_version ?? "" },
      new_instance: row.new_slot === null ? null : { slot: row.new_slot, version: row.version },
      error:
        row.error_code === null
          ? null
          : { code: row.error_code, message: row.error_message ?? row.error_code },
      signature:
        row.signature_key_id === null
          ? null
          : {
              key_id: row.signature_key_id,
              signed_file: row.signature_file ?? "",
              trusted_comment: row.signature_comment ?? "",
            },
      history,
      created_at: row.created_at,
      updated_at: row.updated_at,
      finished_at: row.finished_at,
      links: { status: statusPath(row.id) },
    };
  }

  /** Writes the `operator_update` event of the update as it is now; inside the caller's transaction. */
  private addEvent(id: string): void {
    const row = this.get(id);
    this.outbox.add({
      type: "operator_update",
      url: row.callback_url,
      data: this.status(row),
      orderingKey: `operator_update:${id}`,
    });
  }
}
