import type { KeyObject } from "node:crypto";
import https from "node:https";
import { join } from "node:path";
import { getCACertificates } from "node:tls";
import type { Logger } from "pino";
import WebSocket from "ws";
import type { Grant } from "../access/scopes.js";
import type { App } from "../http/types.js";
import type { Db } from "../store/db.js";
import { readSecret } from "../store/secrets.js";
import { fs, http, type IncomingMessage, type Server } from "../util/node-builtins.js";
import { sleep } from "../util/timers.js";
import { Dispatcher } from "./dispatch.js";
import type { AgentIdentity } from "./identity.js";
import { connectionPrincipalOf } from "./principal.js";
import { channelBinding, type Headers, publicKeyFromBase64, SUBPROTOCOL } from "./protocol.js";
import { ReplayCache } from "./replay.js";
import { ReplayStore } from "./replay-store.js";
import { AgentSession, type Counters, SessionError } from "./session.js";
import type { Corkable } from "./streams.js";

export interface ConnectClientOptions {
  url: string;
  /** PEM of the CAs the control plane's certificate is verified with; undefined: the system's. */
  ca: string | undefined;
  pinned: readonly string[];
  enrollToken: string | undefined;
  scopes: readonly Grant[];
  dataDir: string;
  /** The agent's key pair (connect/identity.ts). */
  identity: AgentIdentity;
  privateKey: KeyObject;
  agentVersion: string;
  app: App;
  /** The agent's database: the changes' answers are kept there for the same ids sent again. */
  db: Db;
  log: Logger;
  /** Reconnect back-off bounds (1 s to 60 s); tests shorten them. */
  backoffMs?: { min: number; max: number };
  heartbeatMs?: number;
  deadAfterMs?: number;
}

export type ConnectState = "connecting" | "connected" | "waiting" | "stopped";

/** The connection as `/v1/status` and `hostkeeper connect show` tell it. */
export interface ConnectStatus {
  url: string;
  state: ConnectState;
  /** When the connection entered its state. */
  since: string;
  /** The control plane's key fingerprint, once it proved it on this connection. */
  control_plane: string | null;
  enrolled: boolean;
  last_error: { message: string; at: string } | null;
  reconnects: number;
  frames_in: number;
  frames_out: number;
  bytes_in: number;
  bytes_out: number;
}

/** The file that says the control plane accepted this agent's enrollment: the token is not presented again. */
export const ENROLLED_FILE = "connect-enrolled";

/**
 * The agent's one connection to its control plane: dialled at start, kept open with heartbeats, dialled
 * again after a loss with jittered exponential back-off (1 s doubling to 60 s, reset by a connection that
 * got through its handshake). Through `HTTPS_PROXY` (an HTTP CONNECT proxy; `NO_PROXY` honoured).
 */
export class ConnectClient {
  private state: ConnectState = "connecting";
  private since = new Date();
  private lastError: { message: string; at: string } | null = null;
  private reconnects = 0;
  private readonly counters: Counters = { framesIn: 0, framesOut: 0, bytesIn: 0, bytesOut: 0 };
  private session: AgentSession | undefined;
  /** Aborted by `close`: no more dialling, and the wait before the next dial ends. */
  private readonly stopping = new AbortController();
  private loop: Promise<void> | undefined;
  private readonly replay: ReplayCache;
  private readonly running = new Set<Promise<unknown>>();
  private readonly pinned: ReadonlyMap<string, KeyObject>;
  private readonly agent: https.Agent | undefined;
  private enrolled: boolean;
  /**
   * The agent's own HTTP handling (Fastify's router) on a server that never listens: the control plane's
   * requests come to it over sockets in memory (connect/http-bridge.ts).
   */
  private readonly server: Server;
  private connected: () => void = () => {};

  constructor(private readonly o: ConnectClientOptions) {
    this.pinned = new Map(o.pinned.map((k) => [k, publicKeyFromBase64(k)]));
    this.replay = new ReplayCache(new ReplayStore(o.db));
    this.server = http.createServer({ requireHostHeader: false }, (req, res) => o.app.routing(req, res));
    // A request Node's parser refuses is answered as on the agent's port: the edge's problem, not Node's text.
    for (const onClientError of o.app.server.listeners("clientError"))
      this.server.on("clientError", onClientError as (...args: unknown[]) => void);
    this.enrolled = enrolledAs(o.dataDir) === o.identity.fingerprint;
    if (this.enrolled && o.enrollToken)
      o.log.warn("this agent is enrolled; HOSTKEEPER_ENROLL_TOKEN is not presented again and can be removed");
    const ca = o.ca ?? systemCas();
    this.agent = o.url.startsWith("wss:") ? new https.Agent({ ca, proxyEnv: process.env }) : undefined;
  }

  /** Dials, and keeps dialling; `connected` runs at each connection that got through its handshake. */
  start(connected: () => void = () => {}): void {
    this.connected = connected;
    this.loop ??= this.run();
  }

  status(): ConnectStatus {
    const c = this.counters;
    return {
      url: this.o.url,
      state: this.state,
      since: this.since.toISOString(),
      control_plane: this.session?.open ? (this.session.controlPlane ?? null) : null,
      enrolled: this.enrolled,
      last_error: this.lastError,
      reconnects: this.reconnects,
      frames_in: c.framesIn,
      frames_out: c.framesOut,
      bytes_in: c.bytesIn,
      bytes_out: c.bytesOut,
    };
  }

  /** Sends an event over the connection; resolves with the control plane's acknowledgement status. */
  deliver(id: string, headers: Headers, body: Buffer, timeoutMs: number): Promise<number> {
    // The session refuses too while it is not open.
    if (this.session === undefined)
      return Promise.reject(new SessionError("not connected to the control plane"));
    return this.session.deliver(id, headers, body, timeoutMs);
  }

  /** Closes the connection, then waits for the requests it started (changes run to their end). */
  async close(): Promise<void> {
    this.stopping.abort();
    this.session?.close();
    await this.loop;
    this.agent?.destroy();
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }

  private enter(state: ConnectState): void {
    this.state = state;
    this.since = new Date();
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (!this.stopping.signal.aborted) {
      this.enter("connecting");
      const { welcomed, why } = await this.connectOnce();
      if (this.stopping.signal.aborted) break;
      this.lastError = { message: why, at: new Date().toISOString() };
      failures = welcomed ? 1 : failures + 1;
      this.reconnects++;
      const delay = redialDelay(failures, this.o.backoffMs);
      this.o.log.info({ reason: why, retry_in_ms: Math.round(delay) }, "reconnecting to the control plane");
      this.enter("waiting");
      await sleep(delay, this.stopping.signal).catch(() => {});
    }
    this.enter("stopped");
  }

  /** One connection from dialling to its close; whether it got through its handshake, and why it ended. */
  private connectOnce(): Promise<{ welcomed: boolean; why: string }> {
    return new Promise((resolve) => {
      let welcomed = false;
      let failure: string | undefined;
      const ws = new WebSocket(this.o.url, SUBPROTOCOL, {
        ...(this.agent ? { agent: this.agent } : {}),
        ...(this.o.ca ? { ca: this.o.ca } : {}),
        handshakeTimeout: 15_000,
        perMessageDeflate: false,
        maxPayload: 16 * 1024 * 1024,
        // RFC 6455's masking keeps a browser's frames from poisoning caches between it and the server; inside
        // TLS, from a program, it protects nothing and costs a pass over every byte at each end (a 7.6 MB
        // list's largest cost). An all-zero mask is one ws (and any reader) applies as a no-op.
        generateMask: (mask: Buffer) => {
          mask.fill(0);
        },
        headers: { "user-agent": `hostkeeper/${this.o.agentVersion}` },
      });
      ws.on("error", (err) => {
        failure ??= err.message;
      });
      ws.on("unexpected-response", (_req, res: IncomingMessage) => {
        failure = `the control plane answered the WebSocket upgrade with HTTP ${res.statusCode}`;
        res.resume();
        ws.terminate();
      });
      let binding = "";
      let remoteAddress = "";
      let socket: Corkable | undefined;
      let opened = false;
      ws.once("upgrade", (res: IncomingMessage) => {
        binding = channelBinding(res.socket);
        remoteAddress = res.socket.remoteAddress ?? "";
        socket = res.socket;
      });
      ws.once("open", () => {
        opened = true;
        const session = this.openSession(ws, { binding, remoteAddress, socket }, () => {
          welcomed = true;
        });
        this.session = session;
        session.ended.then((why) => {
          if (this.session === session) this.session = undefined;
          if (session.refusal === "unknown_agent" && this.enrolled)
            this.o.log.warn(
              { path: join(this.o.dataDir, ENROLLED_FILE) },
              "the control plane no longer knows this agent; to enroll it again, remove this file and set a new HOSTKEEPER_ENROLL_TOKEN",
            );
          resolve({ welcomed, why });
        });
      });
      ws.once("close", () => {
        if (!opened) resolve({ welcomed, why: failure ?? "the connection closed before its handshake" });
      });
    });
  }

  private openSession(
    ws: WebSocket,
    {
      binding,
      remoteAddress,
      socket,
    }: { binding: string; remoteAddress: string; socket: Corkable | undefined },
    onWelcome: () => void,
  ): AgentSession {
    const o = this.o;
    return new AgentSession(ws, {
      publicKey: o.identity.publicKey,
      privateKey: o.privateKey,
      pinned: this.pinned,
      enrollToken: this.enrolled ? undefined : o.enrollToken,
      binding,
      ...(socket ? { socket } : {}),
      agentVersion: o.agentVersion,
      counters: this.counters,
      log: o.log,
      ...(o.heartbeatMs ? { heartbeatMs: o.heartbeatMs } : {}),
      ...(o.deadAfterMs ? { deadAfterMs: o.deadAfterMs } : {}),
      welcomed: (controlPlane, enrolled, sink) => {
        onWelcome();
        this.enter("connected");
        if (enrolled && !this.enrolled) this.recordEnrollment(controlPlane);
        o.log.info({ control_plane: controlPlane, url: o.url }, "connected to the control plane");
        setImmediate(this.connected);
        return new Dispatcher({
          server: this.server,
          peer: controlPlane,
          principal: connectionPrincipalOf(controlPlane, o.scopes),
          remoteAddress,
          replay: this.replay,
          running: this.running,
          sink,
          log: o.log,
        });
      },
    });
  }

  private recordEnrollment(controlPlane: string): void {
    const record = {
      agent: this.o.identity.fingerprint,
      control_plane: controlPlane,
      at: new Date().toISOString(),
    };
    // Root's data dir (store/data-dir.ts): no other user can change what is written here.
    fs.writeFileSync(join(this.o.dataDir, ENROLLED_FILE), `${JSON.stringify(record)}\n`, { mode: 0o600 });
    this.enrolled = true;
    this.o.log.info(
      { control_plane: controlPlane },
      "enrolled with the control plane; the enrollment token is not presented again and HOSTKEEPER_ENROLL_TOKEN can be removed",
    );
  }
}

/**
 * The wait before dialling again after `failures` failed or lost connections in a row: 1 s doubling to 60 s,
 * with equal jitter (half the step fixed, half random), so a fleet cut off together does not return together.
 */
export function redialDelay(
  failures: number,
  bounds: { min: number; max: number } = { min: 1000, max: 60_000 },
  random: () => number = Math.random,
): number {
  const step = Math.min(bounds.max, bounds.min * 2 ** Math.max(0, failures - 1));
  return step / 2 + random() * (step / 2);
}

/** The host's CA store; Node's bundled list where the host has none Node can read. */
function systemCas(): string[] | undefined {
  try {
    const cas = getCACertificates("system");
    return cas.length > 0 ? cas : undefined;
  } catch {
    return undefined;
  }
}

/** The agent fingerprint the enrollment record was written for; undefined without one (or an unreadable one). */
function enrolledAs(dataDir: string): string | undefined {
  const { value } = readSecret(dataDir, ENROLLED_FILE);
  if (value === undefined) return undefined;
  try {
    return (JSON.parse(value) as { agent?: string }).agent;
  } catch {
    return undefined;
  }
}
