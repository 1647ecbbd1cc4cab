/**
 * A control plane in one file, on the library in src/connect/control-plane (docs/connect.md): it accepts
 * agents over wss://, enrolls them with one-time tokens, relays a platform's calls to them and records their
 * events. Run it (after `npm run build`) with:
 *
 *   CP_DIR=/var/lib/my-control-plane CP_LISTEN=0.0.0.0:8443 CP_TLS_CERT=cert.pem CP_TLS_KEY=key.pem \
 *     scripts/node dist/docs/examples/control-plane.js
 *
 * It prints its public key (for the agents' HOSTKEEPER_CONNECT_KEYS) and one enrollment token per start
 * (for HOSTKEEPER_ENROLL_TOKEN), as JSON lines on stdout. Without CP_TLS_CERT it serves plain ws:// (only
 * for a loopback address, or behind a TLS-terminating proxy: set CP_BEHIND_TLS_PROXY=1).
 *
 * The platform's side is a small HTTP API on CP_API_LISTEN (default 127.0.0.1:8444):
 *   GET  /agents                          the connected agents' fingerprints
 *   POST /agents/<fingerprint>/request    {"id", "method", "path", "headers", "body"}: the agent's answer
 *   GET  /events                          the events received, in order
 */
import { generateKeyPairSync } from "node:crypto";
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer as createHttpServer, type IncomingMessage, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { join } from "node:path";
import { type AgentKey, ControlPlane, type Enrollment } from "../../src/connect/control-plane/index.js";

const dir = process.env.CP_DIR ?? ".";
const [host, port] = (process.env.CP_LISTEN ?? "127.0.0.1:8443").split(":");
const [apiHost, apiPort] = (process.env.CP_API_LISTEN ?? "127.0.0.1:8444").split(":");

mkdirSync(dir, { recursive: true, mode: 0o700 });

/** The control plane's key, made once and kept: agents pin its public half. */
const keyFile = join(dir, "control-plane.key");
if (!existsSync(keyFile)) {
  const pem = generateKeyPairSync("ed25519").privateKey.export({ format: "pem", type: "pkcs8" });
  writeFileSync(keyFile, pem, { mode: 0o600 });
}

/** Enrolled agents and unused tokens, in files, so that a restarted control plane knows its agents. */
class FileEnrollment implements Enrollment {
  private readonly file = join(dir, "enrollment.json");
  private state: { agents: string[]; tokens: string[] } = existsSync(this.file)
    ? JSON.parse(readFileSync(this.file, "utf8"))
    : { agents: [], tokens: [] };

  issue(): string {
    const token = crypto.randomUUID();
    this.state.tokens.push(token);
    this.save();
    return token;
  }
  isEnrolled(agent: AgentKey): boolean {
    return this.state.agents.includes(agent.fingerprint);
  }
  enroll(token: string, agent: AgentKey): boolean {
    if (!this.state.tokens.includes(token)) return false;
    this.state.tokens = this.state.tokens.filter((t) => t !== token);
    this.state.agents.push(agent.fingerprint);
    this.save();
    return true;
  }
  private save(): void {
    // Unused tokens are secrets: readable by the control plane's user alone.
    writeFileSync(this.file, JSON.stringify(this.state), { mode: 0o600 });
  }
}

const enrollment = new FileEnrollment();
const eventsFile = join(dir, "events.jsonl");
const cp = new ControlPlane({
  privateKey: readFileSync(keyFile, "utf8"),
  enrollment,
  behindTlsProxy: process.env.CP_BEHIND_TLS_PROXY === "1",
  onAgent: (agent) => log({ connected: agent.fingerprint, from: agent.remoteAddress }),
  onEvent: (agent, event) => {
    // The event's id is its idempotency key: a redelivery carries the same one.
    appendFileSync(
      eventsFile,
      `${JSON.stringify({ agent: agent.fingerprint, id: event.id, type: event.type, data: event.data })}\n`,
    );
    return 200;
  },
  onRefused: (why) => log({ refused: why }),
});

const tls = process.env.CP_TLS_CERT
  ? { cert: readFileSync(process.env.CP_TLS_CERT), key: readFileSync(process.env.CP_TLS_KEY ?? "") }
  : undefined;
const server: Server = tls ? (createHttpsServer(tls) as unknown as Server) : createHttpServer();
cp.attach(server, "/agents");

/** The platform's API: its calls go to an agent by fingerprint, over that agent's connection. */
const api = createHttpServer(async (req, res) => {
  try {
    const match = /^\/agents\/([^/]+)\/request$/.exec(req.url ?? "");
    if (req.method === "GET" && req.url === "/agents") return send(res, 200, [...cp.agents.keys()]);
    if (req.method === "GET" && req.url === "/events")
      return send(
        res,
        200,
        existsSync(eventsFile)
          ? readFileSync(eventsFile, "utf8")
              .trim()
              .split("\n")
              .filter(Boolean)
              .map((l) => JSON.parse(l))
          : [],
      );
    if (req.method !== "POST" || !match) return send(res, 404, { error: "not found" });
    const agent = cp.agents.get(decodeURIComponent(match[1] ?? ""));
    if (!agent) return send(res, 404, { error: "agent not connected" });
    const call = JSON.parse(await text(req)) as {
      id?: string;
      method?: string;
      path: string;
      headers?: Record<string, string>;
      body?: unknown;
    };
    const json: Record<string, string> =
      call.body === undefined ? {} : { "content-type": "application/json" };
    const answer = await agent.fetch(call.path, {
      method: call.method ?? "GET",
      headers: { ...json, ...call.headers },
      ...(call.id ? { id: call.id } : {}),
      ...(call.body === undefined ? {} : { body: JSON.stringify(call.body) }),
    });
    send(res, 200, { status: answer.status, body: await answer.text() });
  } catch (err) {
    send(res, 502, { error: (err as Error).message });
  }
});

function send(res: import("node:http").ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

async function text(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

function log(what: unknown): void {
  process.stdout.write(`${JSON.stringify(what)}\n`);
}

server.listen(Number(port), host, () =>
  api.listen(Number(apiPort), apiHost, () =>
    log({
      listening: `${tls ? "wss" : "ws"}://${host}:${port}/agents`,
      public_key: cp.publicKey,
      fingerprint: cp.fingerprint,
      enroll_token: enrollment.issue(),
    }),
  ),
);
process.on("SIGTERM", () => cp.close().then(() => process.exit(0)));
