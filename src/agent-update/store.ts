import type { Logger } from "pino";
import type { Outbox } from "../events/outbox.js";
import type { Db, Migration } from "../store/db.js";
import { StateHistory } from "../store/state-history.js";
import { AgentUpdateNotFoundError } from "./errors.js";
import {
  type AgentUpdateErrorCode,
  type AgentUpdateState,
  type AgentUpdateStatus,
  FINAL_STATES,
} from "./schemas.js";

export const agentUpdateMigrations: Migration[] = [
  {
    name: "agent_update.001_updates",
    sql: `
      CREATE TABLE agent_updates (
        id TEXT PRIMARY KEY,
        request TEXT NOT NULL,
        state TEXT NOT NULL,
        from_version TEXT NOT NULL,
        to_version TEXT,
        package_url TEXT NOT NULL,
        package_format TEXT NOT NULL,
        architecture TEXT NOT NULL,
        checksum TEXT,
        allow_downgrade INTEGER NOT NULL,
        callback_url TEXT,
        updater_unit TEXT,
        bytes_done INTEGER NOT NULL DEFAULT 0,
        bytes_total INTEGER,
        signature_key_id TEXT,
        signature_file TEXT,
        signature_comment TEXT,
        error_code TEXT,
        error_message TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        finished_at TEXT
      );
      -- At most one unfinished update, whatever the code above it does.
      CREATE UNIQUE INDEX agent_updates_one_running ON agent_updates ((finished_at IS NULL))
        WHERE finished_at IS NULL;
      CREATE TABLE agent_update_states (
        update_id TEXT NOT NULL REFERENCES agent_updates (id),
        seq INTEGER NOT NULL,
        state TEXT NOT NULL,
        at TEXT NOT NULL,
        PRIMARY KEY (update_id, seq)
      );`,
  },
];

export interface AgentUpdateRow {
  id: string;
  request: string;
  state: AgentUpdateState;
  from_version: string;
  to_version: string | null;
  package_url: string;
  package_format: "deb" | "rpm";
  architecture: string;
  checksum: string | null;
  allow_downgrade: number;
  callback_url: string | null;
  /** The transient systemd unit the install runs in, once started. */
  updater_unit: string | null;
  bytes_done: number;
  bytes_total: number | null;
  signature_key_id: string | null;
  signature_file: string | null;
  signature_comment: string | null;
  error_code: AgentUpdateErrorCode | null;
  error_message: string | null;
  created_at: string;
  updated_at: string;
  finished_at: string | null;
}

export type NewAgentUpdate = Pick<
  AgentUpdateRow,
  | "id"
  | "request"
  | "from_version"
  | "to_version"
  | "package_url"
  | "package_format"
  | "architecture"
  | "checksum"
  | "allow_downgrade"
  | "callback_url"
>;

type Fields = Partial<
  Pick<
    AgentUpdateRow,
    | "to_version"
    | "updater_unit"
    | "signature_key_id"
    | "signature_file"
    | "signature_comment"
    | "error_code"
    | "error_message"
  >
>;

const statusPath = (id: string) => `/v1/agent/update/${encodeURIComponent(id)}`;

/**
 * The agent's self-updates with their history of states. Every state change is one transaction that also
 * writes the `agent_update` event (when the request gave a callback URL).
 */
export class AgentUpdateStore {
  private readonly states: StateHistory<AgentUpdateState>;

  constructor(
    private readonly db: Db,
    private readonly outbox: Outbox,
    private readonly log: Logger,
  ) {
    this.states = new StateHistory(db, {
      table: "agent_updates",
      history: "agent_update_states",
      final: FINAL_STATES,
    });
  }

  find(id: string): AgentUpdateRow | undefined {
    return this.db.prepare("SELECT * FROM agent_updates WHERE id = ?").get(id) as AgentUpdateRow | undefined;
  }

  get(id: string): AgentUpdateRow {
    const row = this.find(id);
    if (row === undefined) throw new AgentUpdateNotFoundError(id);
    return row;
  }

  /** The unfinished update, if any. */
  unfinished(): AgentUpdateRow | undefined {
    return this.db.prepare("SELECT * FROM agent_updates WHERE finished_at IS NULL").get() as
      | AgentUpdateRow
      | undefined;
  }

  newest(): AgentUpdateRow | undefined {
    return this.db
      .prepare("SELECT * FROM agent_updates ORDER BY created_at DESC, rowid DESC LIMIT 1")
      .get() as AgentUpdateRow | undefined;
  }

  /** Records a new update in state `downloading` (with its event). */
  create(u: NewAgentUpdate): AgentUpdateRow {
    const now = new Date().toISOString();
    this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT INTO agent_updates (id, request, state, from_version, to_version, package_url, package_format,
             architecture, checksum, allow_downgrade, callback_url, created_at, updated_at)
           VALUES (@id, @request, 'downloading', @from_version, @to_version, @package_url, @package_format,
             @architecture, @checksum, @allow_downgrade, @callback_url, @now, @now)`,
        )
        .run({ ...u, now });
      this.states.append(u.id, "downloading", now);
      this.addEvent(u.id);
    })();
    this.log.info(
      {
        agent_update: u.id,
        state: "downloading",
        from: u.from_version,
        to: u.to_version,
        url: u.package_url,
      },
      `agent update ${u.id}: downloading`,
    );
    this.outbox.kick();
    return this.get(u.id);
  }

  /** Moves an update to `state` (setting `fields` too), with its history entry and its event. */
  transition(id: string, state: AgentUpdateState, fields: Fields = {}): AgentUpdateRow {
    this.states.move(id, state, fields, () => this.addEvent(id));
    this.outbox.kick();
    const row = this.get(id);
    const line = {
      agent_update: id,
      state,
      from: row.from_version,
      to: row.to_version,
      ...(row.error_code === null ? {} : { error_code: row.error_code, error: row.error_message }),
    };
    if (state === "failed" || state === "rolled_back") this.log.warn(line, `agent update ${id}: ${state}`);
    else this.log.info(line, `agent update ${id}: ${state}`);
    return row;
  }

  /** Sets fields without a change of state. */
  set(id: string, fields: Fields): void {
    const sets = Object.keys(fields).map((k) => `${k} = @${k}`);
    if (sets.length === 0) return;
    this.db
      .prepare(`UPDATE agent_updates SET ${sets.join(", ")}, updated_at = @now WHERE id = @id`)
      .run({ ...fields, id, now: new Date().toISOString() });
  }

  setProgress(id: string, done: number, total: number | undefined): void {
    this.db
      .prepare("UPDATE agent_updates SET bytes_done = ?, bytes_total = ? WHERE id = ?")
      .run(done, total ?? null, id);
  }

  status(row: AgentUpdateRow): AgentUpdateStatus {
    const history = this.states.of(row.id);
    return {
      id: row.id,
      state: row.state,
      from_version: row.from_version,
      to_version: row.to_version,
      package_url: row.package_url,
      package_format: row.package_format,
      architecture: row.architecture,
      progress: { bytes_downloaded: row.bytes_done, bytes_total: row.bytes_total },
      signature:
        row.signature_key_id === null
          ? null
          : {
              key_id: row.signature_key_id,
              signed_file: row.signature_file ?? "",
              trusted_comment: row.signature_comment ?? "",
            },
      error:
        row.error_code === null
          ? null
          : { code: row.error_code, message: row.error_message ?? row.error_code },
      history,
      created_at: row.created_at,
      updated_at: row.updated_at,
      finished_at: row.finished_at,
      links: { status: statusPath(row.id) },
    };
  }

  /** The `agent_update` event of the update as it is now, when it has a callback; inside the caller's transaction. */
  private addEvent(id: string): void {
    const row = this.get(id);
    if (row.callback_url === null) return;
    this.outbox.add({
      type: "agent_update",
      url: row.callback_url,
      data: this.status(row),
      orderingKey: `agent_update:${id}`,
    });
  }
}
