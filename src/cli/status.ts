import { packageVersion } from "../paths.js";
import {
  type AgentAnswer,
  type AgentClient,
  CliFailure,
  connect,
  problemLine,
  showAddress,
} from "./agent.js";
import { type Command, positiveSeconds } from "./args.js";
import { fields, print } from "./output.js";

/** One part of the report: the API's answer as it came (parsed), or why there is none. */
interface Part {
  /** HTTP status of the answer; null when there was none. */
  status: number | null;
  body: unknown;
  /** Why there is no answer (agent unreachable, token unreadable), or the answer's problem in one line. */
  error: string | null;
}

export interface StatusReport {
  versions: { hostkeeper: string; node: string };
  agent: Part & { address: string };
  caddy: Part;
  operator: Part;
}

async function part(ask: () => Promise<AgentAnswer>): Promise<Part> {
  try {
    const { status, text } = await ask();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // kept as text
    }
    return { status, body, error: status >= 400 ? problemLine(status, text) : null };
  } catch (err) {
    if (err instanceof CliFailure) return { status: null, body: null, error: err.message };
    throw err;
  }
}

const unknown = (why: string): Part => ({ status: null, body: null, error: why });

/**
 * The agent's state, from what it serves today: GET /healthz (no token needed), GET /v1/proxy/routes (Caddy
 * reachable, or 503) and GET /v1/operator/running-instance. When the agent serves one GET /v1/status, this
 * function is what changes; the report keeps its shape.
 */
export async function gatherStatus(client: AgentClient): Promise<StatusReport> {
  const versions = { hostkeeper: packageVersion(), node: process.version };
  const health = await part(() => client.request("GET", "/healthz", { auth: false }));
  const agent = { address: showAddress(client.address), ...health };
  if (health.status === null) {
    const why = "unknown: the agent is not reachable";
    return { versions, agent, caddy: unknown(why), operator: unknown(why) };
  }
  const [caddy, operator] = await Promise.all([
    part(() => client.request("GET", "/v1/proxy/routes")),
    part(() => client.request("GET", "/v1/operator/running-instance")),
  ]);
  return { versions, agent, caddy, operator };
}

/**
 * Waits up to `ms` for the agent to answer its health check with 200: an agent that is still starting
 * refuses connections. Resolves either way; the report that follows says what is wrong.
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
    await new Promise((r) => setTimeout(r, Math.min(200, left)));
  }
}

/** Healthy: the agent answers its health check and Caddy answers the agent. */
export const healthy = (r: StatusReport) => r.agent.status === 200 && r.caddy.status === 200;

function describe(r: StatusReport): string {
  const agent =
    r.agent.status === 200
      ? `running at ${r.agent.address}, healthy`
      : r.agent.status === null
        ? (r.agent.error ?? "")
        : `unhealthy at ${r.agent.address}: ${r.agent.error}`;
  const caddy =
    r.caddy.status === 200 && Array.isArray(r.caddy.body)
      ? `reachable, ${r.caddy.body.length} route${r.caddy.body.length === 1 ? "" : "s"}`
      : r.caddy.status === 503
        ? `unavailable: ${r.caddy.error}`
        : (r.caddy.error ?? "");
  const i = r.operator.body as { slot?: string; version?: string; pid?: number; port?: number };
  const operator =
    r.operator.status === 200
      ? `${i.version} (${i.slot}), pid ${i.pid}, port ${i.port}, healthy`
      : r.operator.status === 503
        ? `no running instance: ${r.operator.error}`
        : (r.operator.error ?? "");
  return fields([
    ["agent", agent],
    ["caddy", caddy],
    ["operator", operator],
    ["versions", `hostkeeper ${r.versions.hostkeeper}, node ${r.versions.node}`],
  ]);
}

const status: Command = {
  words: ["status"],
  positionals: { min: 0, max: 0 },
  summary: "Show the agent's health, whether Caddy answers it, the operator instance and versions.",
  details: [
    "Exit code 0 when the agent is healthy and Caddy answers it, 1 otherwise (an operator without a running",
    "instance is reported, not failed). The version is this installation's: the CLI and the agent ship together.",
    "With --json: {versions, agent, caddy, operator}, each part with the API's status and body as it came.",
    "With --wait, the report comes once the agent answers its health check, or once the wait is over.",
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
