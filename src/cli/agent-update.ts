import { type AgentUpdateRequest, type AgentUpdateStatus, FINAL_STATES } from "../agent-update/schemas.js";
import { type AgentClient, AgentUnreachable, CliFailure, connect, loadAgentConfig } from "./agent.js";
import { type Command, type Invocation, UsageError, usageLine } from "./args.js";
import { INTERRUPTED_EXIT, pause, seconds, terminal, untilInterrupted, writeLive } from "./follow.js";
import { print } from "./output.js";

/* `hostkeeper agent update`: the agent's self-update, started through its API and followed to its end. */

/** How often the update's status is asked for. */
const POLL_MS = 500;
/** How often while the agent is out of reach (restarting). */
const UNREACHABLE_POLL_MS = 1_000;
/**
 * How long, past HOSTKEEPER_AGENT_UPDATE_TIMEOUT_S, the agent may stay out of reach before following gives up:
 * the package's install before the new agent starts, and a rollback's reinstall after it failed to.
 */
export const RESTART_MARGIN_S = 60;

export interface AgentUpdateFollowing {
  /** Print each new status record as the API gives it, one per line. */
  json: boolean;
  /** The current state's line rewritten in place (its progress) instead of a line per state. */
  tty: boolean;
  columns?: number;
  /** How long the agent may stay out of reach in a row. */
  unreachableMs: number;
}

const statusPath = (s: AgentUpdateStatus) => `/v1/agent/update/${encodeURIComponent(s.id)}`;
const whereTo = (s: AgentUpdateStatus) => `GET ${statusPath(s)} shows it`;

const mb = (bytes: number) => (bytes / 1e6).toFixed(1);
const versions = (s: AgentUpdateStatus) => `${s.from_version} -> ${s.to_version ?? "?"}`;

/** Where the update is, in one line: `agent update au_... downloading 12.3/40.1 MB`. */
export function stateLine(s: AgentUpdateStatus): string {
  const head = `agent update ${s.id} ${s.state}`;
  switch (s.state) {
    case "downloading": {
      const { bytes_downloaded: done, bytes_total: total } = s.progress;
      return `${head} ${mb(done)}${total === null ? "" : `/${mb(total)}`} MB`;
    }
    case "installing":
    case "restarting":
      return `${head} ${versions(s)}`;
    case "completed": {
      const took = Date.parse(s.finished_at ?? s.updated_at) - Date.parse(s.created_at);
      return `${head}: ${versions(s)} in ${seconds(took)}`;
    }
    case "rolled_back":
    case "failed":
      return `${head}: ${s.error?.message ?? "no reason given"}`.replace(/\s+/g, " ");
    default:
      return head;
  }
}

/** Lines keyed by what they say: on a terminal the current one rewritten until its key changes, else a line per key. */
class Lines {
  private key: string | undefined;
  private live = false;

  constructor(private readonly o: { tty: boolean; columns?: number }) {}

  show(key: string, line: string): void {
    if (!this.o.tty) {
      if (key !== this.key) print(line);
    } else {
      if (key !== this.key && this.live) process.stdout.write("\n");
      writeLive(line, this.o.columns);
      this.live = true;
    }
    this.key = key;
  }

  /** Ends the live line, if any. */
  end(): void {
    if (this.live) process.stdout.write("\n");
    this.live = false;
  }
}

/**
 * Follows the update whose accepted status is `first` until it is final: a line per state, or each new
 * status record (`json`). The agent restarts on the way: while it is out of reach the status is asked for
 * again, for `o.unreachableMs` in a row at the most. SIGINT stops the following only. Resolves with 0 when
 * completed, 130 when interrupted; rolled back or failed is a CliFailure.
 */
export async function followAgentUpdate(
  client: AgentClient,
  first: string,
  o: AgentUpdateFollowing,
): Promise<number> {
  const lines = new Lines({ tty: o.tty && !o.json, columns: o.columns });
  let s = JSON.parse(first) as AgentUpdateStatus;
  let text: string | undefined = first;
  let printed: string | undefined;
  let outSince: number | undefined;
  try {
    return await untilInterrupted(async (stop) => {
      for (;;) {
        if (text !== undefined) {
          s = JSON.parse(text) as AgentUpdateStatus;
          if (o.json && text !== printed) print(text);
          printed = text;
          outSince = undefined;
          if (FINAL_STATES.has(s.state)) return finished(s, lines, o.json);
          if (!o.json) lines.show(s.state, stateLine(s));
        }
        if (!(await pause(text === undefined ? UNREACHABLE_POLL_MS : POLL_MS, stop))) {
          lines.end();
          process.stderr.write(
            `hostkeeper: stopped following; agent update ${s.id} goes on: ${whereTo(s)}\n`,
          );
          return INTERRUPTED_EXIT;
        }
        try {
          text = (await client.call("GET", statusPath(s))).text;
        } catch (err) {
          if (!(err instanceof AgentUnreachable)) throw err;
          outSince ??= Date.now();
          if (Date.now() - outSince >= o.unreachableMs)
            throw new CliFailure(
              `${err.message} for ${seconds(o.unreachableMs)}; agent update ${s.id} may go on: ${whereTo(s)}`,
            );
          if (!o.json) lines.show("waiting", waitingLine(s, err, o.unreachableMs));
          text = undefined;
        }
      }
    });
  } finally {
    lines.end();
  }
}

/** While the agent restarts: `agent update au_... waiting for the agent (up to 180 s): ...refused)`. */
function waitingLine(s: AgentUpdateStatus, err: AgentUnreachable, ms: number): string {
  return `agent update ${s.id} waiting for the agent (up to ${Math.round(ms / 1000)} s): ${err.message}`;
}

/** The end: its line (not with `json`) and 0 when completed; a rollback or a failure is a CliFailure of its line. */
function finished(s: AgentUpdateStatus, lines: Lines, json: boolean): number {
  if (s.state !== "completed") {
    lines.end();
    throw new CliFailure(stateLine(s));
  }
  if (!json) lines.show(s.state, stateLine(s));
  return 0;
}

/** The request's body from the command line: a URL (`://`) is sent as `url`, anything else as `version`. */
function requestOf(inv: Invocation): AgentUpdateRequest {
  const target = inv.positionals[0] as string;
  const body: AgentUpdateRequest = target.includes("://") ? { url: target } : { version: target };
  const { source, checksum } = inv.options;
  if (typeof source === "string") {
    if (body.url !== undefined)
      throw new UsageError("--source goes with a version, not with a package URL", usageLine(update));
    body.artifact_source = source;
  }
  if (typeof checksum === "string") body.checksum = checksum;
  if (inv.options["allow-downgrade"] === true) body.allow_downgrade = true;
  return body;
}

const update: Command = {
  words: ["agent", "update"],
  args: "<version|url>",
  positionals: { min: 1, max: 1 },
  summary: "Update the agent itself to a version or a package URL, and follow the update to its end.",
  details: [
    "POST /v1/agent/update with `version`, or `url` when the argument has `://`, then GET",
    "/v1/agent/update/<id> every half second: a line per state (the megabytes downloaded, rewritten in",
    "place on a terminal); --json prints each new status record, one per line. The agent restarts on the",
    "way: it is waited for, up to HOSTKEEPER_AGENT_UPDATE_TIMEOUT_S + 60 s in a row. Exits 0 when the",
    "update completed, 1 when it was rolled back, failed or refused, 130 on Ctrl-C (the update goes on).",
  ],
  options: [
    { name: "allow-downgrade", doc: "Install a version older than (or the same as) the running one." },
    {
      name: "source",
      value: "PREFIX",
      doc: "With a version: the release prefix (https://, s3://bucket/prefix), not HOSTKEEPER_AGENT_UPDATE_SOURCE.",
    },
    {
      name: "checksum",
      value: "SHA256",
      doc: "The package's SHA-256 (64 hex digits, or sha256:<hex>), checked besides its signature.",
    },
    { name: "no-follow", doc: "Print the accepted update and return; it goes on in the agent." },
  ],
  timeoutSeconds: 30,
  run: async (inv) => {
    const body = requestOf(inv);
    const client = connect(inv.timeoutMs);
    const answer = await client.call("POST", "/v1/agent/update", { body });
    if (inv.options["no-follow"] === true) {
      const s = JSON.parse(answer.text) as AgentUpdateStatus;
      print(inv.json ? answer.text : `${stateLine(s)}; ${whereTo(s)}`);
      return 0;
    }
    const timeoutS = loadAgentConfig().config.agentUpdate.timeoutS;
    const unreachableMs = (timeoutS + RESTART_MARGIN_S) * 1000;
    return followAgentUpdate(client, answer.text, { json: inv.json, ...terminal(), unreachableMs });
  },
};

export const agentUpdateCommands: Command[] = [update];
