import type { AgentStatus, Readiness } from "../health/schemas.js";
import { packageVersion } from "../paths.js";
import type { Compliance } from "../system/compliance.js";
import { plural } from "../util/text.js";
import { sleep } from "../util/timers.js";
import { hostPort } from "../util/urls.js";
import {
  type AgentAnswer,
  type AgentClient,
  AgentUnreachable,
  CliFailure,
  connect,
  problemLine,
} from "./agent.js";
import { type Command, positiveSeconds } from "./args.js";
import { fields, print } from "./output.js";

/** One answer of the API (parsed), or why there is none. */
interface Part {
  /** HTTP status of the answer; null when there was none. */
  status: number | null;
  body: unknown;
  /** Why there is no answer (agent unreachable, token unreadable), or the answer's problem in one line. */
  error: string | null;
}

export interface StatusReport {
  /** The CLI's own; the agent's are in `status.body.versions`. */
  versions: { hostkeeper: string; node: string };
  agent: { address: string };
  /** GET /v1/status. */
  status: Part;
  /**
   * GET /readyz, which needs no token: asked only when GET /v1/status gave no answer while the agent is
   * reachable (the token cannot be read, or is refused), so the report still says whether the agent is ready.
   */
  readiness: Part | null;
  /** GET /v1/system/compliance, asked when GET /v1/status answered; null otherwise. */
  compliance: Part | null;
}

/** The answer; `reached` is false when the agent could not be reached at all. */
async function part(ask: () => Promise<AgentAnswer>): Promise<{ part: Part; reached: boolean }> {
  try {
    const { status, text } = await ask();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // kept as text
    }
    // /readyz answers 503 with its checks, not a problem: its body says what failed.
    const error = status >= 400 && status !== 503 ? problemLine(status, text) : null;
    return { part: { status, body, error }, reached: true };
  } catch (err) {
    if (err instanceof CliFailure)
      return {
        part: { status: null, body: null, error: err.message },
        reached: !(err instanceof AgentUnreachable),
      };
    throw err;
  }
}

/** The agent's state from GET /v1/status; from GET /readyz alone when the status cannot be had. */
export async function gatherStatus(client: AgentClient): Promise<StatusReport> {
  const versions = { hostkeeper: packageVersion(), node: process.version };
  const agent = { address: hostPort(client.address) };
  const { part: status, reached } = await part(() => client.request("GET", "/v1/status"));
  const readiness =
    status.status !== 200 && reached
      ? (await part(() => client.request("GET", "/readyz", { auth: false }))).part
      : null;
  const compliance =
    status.status === 200 ? (await part(() => client.request("GET", "/v1/system/compliance"))).part : null;
  return { versions, agent, status, readiness, compliance };
}

/**
 * Waits up to `ms` for the agent to answer its liveness check (GET /healthz) with 200: an agent that is
 * still starting refuses connections. Resolves either way; the report that follows says what is wrong.
 */
export async function waitForAgent(client: AgentClient, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      if ((await client.request("GET", "/healthz", { auth: false })).status === 200) return;
    } catch (err) {
      if (!(err instanceof CliFailure)) throw err;
    }
    const left = deadline - Date.now();
    if (left <= 0) return;
    await sleep(Math.min(200, left));
  }
}

const statusBody = (r: StatusReport) =>
  r.status.status === 200 ? (r.status.body as AgentStatus) : undefined;

function readinessOf(r: StatusReport): Readiness | undefined {
  const s = statusBody(r);
  if (s) return s.readiness;
  const b = r.readiness?.body as Readiness | undefined;
  return typeof b === "object" && b !== null && "checks" in b ? b : undefined;
}

/** Healthy: the agent answers and is ready (its database, Caddy's admin API and the listeners answer). */
export const healthy = (r: StatusReport) => readinessOf(r)?.status === "ready";

function duration(seconds: number): string {
  const d = Math.floor(seconds / 86_400);
  const h = Math.floor((seconds % 86_400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m}m`;
  if (m > 0) return `${m}m ${seconds % 60}s`;
  return `${seconds}s`;
}

function readinessText(x: Readiness): string {
  if (x.status === "ready") return "ready";
  const failing = Object.entries(x.checks).filter(([, c]) => c.status !== "ok");
  return `not ready: ${failing.map(([name, c]) => `${name}: ${c.detail}`).join("; ")}`;
}

/** The patch state in one line: security updates and CVEs pending and their age, the last apply, the reboot. */
function patchesText(part: Part | null): string {
  if (part?.status !== 200) return `unknown: ${part?.error ?? "not asked"}`;
  const c = part.body as Compliance;
  if (c.checked_at === null) return "never checked";
  const age = (s: number | null) => (s === null ? "" : ` (oldest ${duration(s)})`);
  return [
    `${c.security_updates_pending} security pending${age(c.oldest_security_update_age_seconds)}`,
    `${plural(c.cves_pending, "CVE")}${age(c.oldest_cve_age_seconds)}`,
    `last successful apply ${c.last_successful_apply_at ?? "never"}`,
    ...(c.reboot_required ? [`reboot required since ${c.reboot_required_since}`] : []),
  ].join(", ");
}

function describeFull(r: StatusReport, s: AgentStatus): string {
  const c = s.caddy;
  const caddyLine = [
    c.mode,
    c.state,
    ...(c.pid === null ? [] : [`pid ${c.pid}`]),
    s.routes.count === null ? "routes unknown" : plural(s.routes.count, "route"),
    ...(c.mode === "embedded"
      ? [`${plural(c.restarts, "restart")}${c.last_exit_at ? ` (last exit ${c.last_exit_at})` : ""}`]
      : []),
  ].join(", ");
  const u = s.updates;
  const pm = s.versions.package_manager;
  const updates =
    u.last_check_at === null
      ? "never checked"
      : `last checked ${u.last_check_at}: ${u.security_updates} security, ${u.regular_updates} regular${u.reboot_required ? ", reboot required" : ""}`;
  const i = s.operator.active_instance;
  const operator =
    i === null
      ? "none installed"
      : `${i.version} (${i.slot})${i.pid === null ? "" : `, pid ${i.pid}`}${i.port === null ? "" : `, port ${i.port}`}${i.running ? ", running" : ", not running"}`;
  return fields([
    [
      "agent",
      `running at ${r.agent.address}, up ${duration(s.uptime_seconds)}, ${readinessText(s.readiness)}`,
    ],
    ["caddy", caddyLine],
    ["outbox", `${s.outbox.pending} pending, ${s.outbox.dead} dead`],
    ["updates", `${pm.name}${pm.version ? ` ${pm.version}` : ""}, ${updates}`],
    ["patches", patchesText(r.compliance)],
    ["operator", operator],
    ["self-update", selfUpdateText(s.agent_update)],
    ["connection", connectionText(s.connect.connection)],
    [
      "versions",
      `hostkeeper ${s.versions.agent}, node ${s.versions.node}${s.versions.caddy ? `, caddy ${s.versions.caddy}` : ""}`,
    ],
  ]);
}

/** The newest self-update: `au_... completed, 0.1.0 -> 0.1.1, at <time>`, or `none`. */
function selfUpdateText(u: AgentStatus["agent_update"]): string {
  if (u === null) return "none";
  const to = u.to_version === null ? "" : ` -> ${u.to_version}`;
  const why = u.error === null ? "" : ` (${u.error.code})`;
  return `${u.id} ${u.state}${why}, ${u.from_version}${to}, at ${u.finished_at ?? u.updated_at}`;
}

/** The connection to the control plane: `connected to SHA256:... since <time>`, why it is down, or `none`. */
function connectionText(c: AgentStatus["connect"]["connection"]): string {
  if (c === null) return "none";
  if (c.state === "connected") return `connected to ${c.control_plane} at ${c.url} since ${c.since}`;
  const why = c.last_error === null ? "" : `: ${c.last_error.message}`;
  return `${c.state} since ${c.since} (${c.url}, ${c.reconnects} reconnects)${why}`;
}

function describe(r: StatusReport): string {
  const s = statusBody(r);
  if (s) return describeFull(r, s);
  const x = readinessOf(r);
  const agent =
    r.readiness === null
      ? (r.status.error ?? "")
      : x
        ? `running at ${r.agent.address}, ${readinessText(x)}`
        : `running at ${r.agent.address}, readiness unknown: ${r.readiness.error ?? r.readiness.status}`;
  return fields([
    ["agent", agent],
    ["status", r.readiness === null ? "unknown: the agent is not reachable" : `unknown: ${r.status.error}`],
    ["versions", `hostkeeper ${r.versions.hostkeeper}, node ${r.versions.node}`],
  ]);
}

const status: Command = {
  words: ["status"],
  positionals: { min: 0, max: 0 },
  summary:
    "Show the agent's status: readiness, Caddy, routes, callbacks, updates, patch compliance, operator, self-update, the connection to the control plane, versions.",
  details: [
    "GET /v1/status and GET /v1/system/compliance; without a usable token, GET /readyz (which needs none) for the agent's readiness alone.",
    "Exit code 0 when the agent is ready (its database, Caddy's admin API and Caddy's listeners answer), 1",
    "otherwise. With --json: {versions, agent, status, readiness, compliance}, each answer with its status and body as it came.",
    "With --wait, the report comes once the agent answers at all (GET /healthz), or once the wait is over.",
  ],
  options: [
    {
      name: "wait",
      value: "SECONDS",
      doc: "First wait up to this long for a starting agent to answer (hostkeeper.service does, after its start).",
      parse: positiveSeconds,
    },
  ],
  timeoutSeconds: 10,
  run: async (inv) => {
    const client = connect(inv.timeoutMs);
    const wait = inv.options.wait;
    if (typeof wait === "number") await waitForAgent(client, wait * 1000);
    const report = await gatherStatus(client);
    print(inv.json ? JSON.stringify(report) : describe(report));
    return healthy(report) ? 0 : 1;
  },
};

export const statusCommands: Command[] = [status];
