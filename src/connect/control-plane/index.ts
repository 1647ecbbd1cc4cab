import { createPrivateKey, type KeyObject, randomBytes, timingSafeEqual } from "node:crypto";
import type { Duplex } from "node:stream";
import { type WebSocket, WebSocketServer } from "ws";
import type { IncomingMessage, Server } from "../../util/node-builtins.js";
import {
  channelBinding,
  decodeMessage,
  encodeFrame,
  type Frame,
  fingerprintOf,
  HANDSHAKE_MS,
  type HandshakeFrame,
  newNonce,
  ProtocolError,
  publicKeyBase64,
  publicKeyFromBase64,
  type RefusalCode,
  type StreamFrame,
  SUBPROTOCOL,
  signTranscript,
  transcript,
  verifyTranscript,
} from "../protocol.js";
import type { Corkable } from "../streams.js";
import { type AgentEvent, ConnectedAgent } from "./agent.js";

export type { AgentEvent, AgentRequestInit } from "./agent.js";
export { ConnectedAgent } from "./agent.js";

/** An agent's key, as the handshake proved it. */
export interface AgentKey {
  publicKey: string;
  fingerprint: string;
}

/** Which agents may connect: the platform's record of enrolled keys and of the one-time tokens it issued. */
export interface Enrollment {
  isEnrolled(agent: AgentKey): boolean | Promise<boolean>;
  /** A token presented by an agent not enrolled yet: true enrolls its key, and the token is used up. */
  enroll(token: string, agent: AgentKey): boolean | Promise<boolean>;
}

/** Enrollment kept in memory: tokens issued here, each good once; a platform keeps its own in its database. */
export class MemoryEnrollment implements Enrollment {
  private readonly tokens = new Set<string>();
  readonly enrolled = new Set<string>();

  /** A new one-time token, for `HOSTKEEPER_ENROLL_TOKEN`. */
  issue(): string {
    const token = randomBytes(24).toString("base64url");
    this.tokens.add(token);
    return token;
  }

  isEnrolled(agent: AgentKey): boolean {
    return this.enrolled.has(agent.fingerprint);
  }

  enroll(token: string, agent: AgentKey): boolean {
    const match = [...this.tokens].find((t) => equal(t, token));
    if (match === undefined) return false;
    this.tokens.delete(match);
    this.enrolled.add(agent.fingerprint);
    return true;
  }
}

const equal = (a: string, b: string) =>
  a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));

export interface ControlPlaneOptions {
  /** The control plane's Ed25519 private key (PEM or KeyObject); agents pin its public key. */
  privateKey: KeyObject | string;
  enrollment: Enrollment;
  /**
   * TLS is terminated by a reverse proxy in front of this process: the agent's TLS channel is not this
   * process's, so its binding cannot be checked here (docs/connect.md, "Behind a reverse proxy").
   */
  behindTlsProxy?: boolean;
  /** Each agent that proved its key and was admitted; an agent connecting again replaces its older connection. */
  onAgent?: (agent: ConnectedAgent) => void;
  /** An agent's event: the status returned is acknowledged (a 2xx ends its retries); a throw acknowledges 500. */
  onEvent?: (agent: ConnectedAgent, event: AgentEvent) => number | undefined | Promise<number | undefined>;
  /** A refused handshake, with why (for the platform's log). */
  onRefused?: (why: { code: RefusalCode; reason: string; remoteAddress: string }) => void;
  heartbeatMs?: number;
  deadAfterMs?: number;
}

/**
 * The control plane's side of the agents' connections: add it to an HTTP(S) server (`attach`, or
 * `handleUpgrade` from the server's own `upgrade` handler), and connected agents appear in `agents`, keyed by
 * their key fingerprint, each with a fetch-like call of its API.
 */
export class ControlPlane {
  readonly publicKey: string;
  readonly fingerprint: string;
  readonly agents = new Map<string, ConnectedAgent>();
  private readonly key: KeyObject;
  private readonly wss: WebSocketServer;
  private readonly waiters = new Map<string, ((a: ConnectedAgent) => void)[]>();

  constructor(private readonly o: ControlPlaneOptions) {
    this.key = typeof o.privateKey === "string" ? createPrivateKey(o.privateKey) : o.privateKey;
    this.publicKey = publicKeyBase64(this.key);
    this.fingerprint = fingerprintOf(this.publicKey);
    this.wss = new WebSocketServer({
      noServer: true,
      perMessageDeflate: false,
      maxPayload: 16 * 1024 * 1024,
      handleProtocols: (protocols) => (protocols.has(SUBPROTOCOL) ? SUBPROTOCOL : false),
    });
  }

  /** Serves agents' upgrades to `path` on `server`; other upgrades are left to the server's other handlers. */
  attach(server: Server, path = "/agents"): void {
    server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      if (new URL(req.url ?? "/", "http://x").pathname === path) this.handleUpgrade(req, socket, head);
    });
  }

  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    this.wss.handleUpgrade(req, socket, head, (ws) => this.handshake(ws, req));
  }

  /** The agent with this fingerprint once it is connected (now, or within `timeoutMs`). */
  waitForAgent(fingerprint: string, timeoutMs = 30_000): Promise<ConnectedAgent> {
    const now = this.agents.get(fingerprint);
    if (now?.open) return Promise.resolve(now);
    return new Promise((resolve, reject) => {
      const list = this.waiters.get(fingerprint) ?? [];
      const timer = setTimeout(() => {
        this.waiters.set(
          fingerprint,
          (this.waiters.get(fingerprint) ?? []).filter((w) => w !== done),
        );
        reject(new Error(`agent ${fingerprint} did not connect within ${timeoutMs} ms`));
      }, timeoutMs);
      const done = (a: ConnectedAgent) => {
        clearTimeout(timer);
        resolve(a);
      };
      list.push(done);
      this.waiters.set(fingerprint, list);
    });
  }

  /** Closes every agent's connection. */
  async close(): Promise<void> {
    const all = [...this.agents.values()];
    for (const a of all) a.close(1001, "the control plane is stopping");
    for (const ws of this.wss.clients) ws.terminate();
    await Promise.all(all.map((a) => a.closed));
    await new Promise<void>((resolve) => this.wss.close(() => resolve()));
  }

  private handshake(ws: WebSocket, req: IncomingMessage): void {
    const remoteAddress = req.socket.remoteAddress ?? "";
    const binding = this.o.behindTlsProxy ? undefined : channelBinding(req.socket);
    // A frame's head and large body come as fragments of their own: not joined into one copy.
    ws.binaryType = "fragments";
    const frames: { header: Frame; body: Buffer }[] = [];
    let wake: (() => void) | undefined;
    let agent: ConnectedAgent | undefined;
    ws.on("message", (data, isBinary) => {
      try {
        if (!isBinary) throw new ProtocolError("a text message; frames are binary");
        const f = decodeMessage(data as Buffer[]);
        if (agent) agent.onFrame(f.header as StreamFrame, f.body);
        else if (frames.length >= 4) throw new ProtocolError("frames before the handshake's end");
        else {
          frames.push(f);
          wake?.();
        }
      } catch (err) {
        ws.close(4400, (err as Error).message.slice(0, 120));
      }
    });
    const next = async (): Promise<HandshakeFrame> => {
      while (frames.length === 0) {
        if (ws.readyState !== ws.OPEN) throw new ProtocolError("closed during the handshake");
        await new Promise<void>((resolve) => {
          wake = resolve;
          ws.once("close", () => resolve());
        });
      }
      return frames.shift()?.header as HandshakeFrame;
    };
    const timer = setTimeout(() => ws.terminate(), HANDSHAKE_MS);
    this.admit(ws, next, binding, remoteAddress, req.socket)
      .then((admitted) => {
        clearTimeout(timer);
        if (admitted === undefined) return;
        agent = admitted;
        for (const f of frames.splice(0)) agent.onFrame(f.header as StreamFrame, f.body);
      })
      .catch(() => {
        clearTimeout(timer);
        ws.terminate();
      });
  }

  /** The handshake's steps (docs/connect.md): the agent admitted, or undefined when it was refused. */
  private async admit(
    ws: WebSocket,
    next: () => Promise<HandshakeFrame>,
    binding: string | undefined,
    remoteAddress: string,
    socket: Corkable,
  ): Promise<ConnectedAgent | undefined> {
    const refuse = (code: RefusalCode, reason: string) => {
      this.o.onRefused?.({ code, reason, remoteAddress });
      ws.send(encodeFrame({ t: "refused", code, reason }));
      ws.close(4403, code);
      return undefined;
    };
    const hello = await next();
    if (hello.t !== "hello" || hello.v !== 1) return refuse("protocol", "expected hello, version 1");
    let agentKey: KeyObject;
    try {
      agentKey = publicKeyFromBase64(hello.key);
    } catch {
      return refuse("protocol", "the agent's key is not an Ed25519 public key");
    }
    if (binding !== undefined && hello.binding !== binding)
      return refuse(
        "binding_mismatch",
        "the agent's TLS channel is not this one: a relay sits between (or the control plane is behind a TLS-terminating proxy without behindTlsProxy)",
      );
    const t = {
      agentKey: hello.key,
      controlPlaneKey: this.publicKey,
      agentNonce: String(hello.nonce),
      controlPlaneNonce: newNonce(),
      binding: String(hello.binding),
    };
    ws.send(
      encodeFrame({
        t: "challenge",
        key: this.publicKey,
        nonce: t.controlPlaneNonce,
        sig: signTranscript(this.key, transcript("control-plane", t)),
      }),
    );
    const auth = await next();
    if (auth.t !== "auth") return refuse("protocol", "expected auth");
    if (!verifyTranscript(agentKey, transcript("agent", t), auth.sig))
      return refuse("bad_signature", "the agent's signature does not verify for this handshake");
    const key: AgentKey = { publicKey: hello.key, fingerprint: fingerprintOf(hello.key) };
    if (!(await this.o.enrollment.isEnrolled(key))) {
      if (auth.enroll_token === undefined)
        return refuse("unknown_agent", `agent ${key.fingerprint} is not enrolled`);
      if (!(await this.o.enrollment.enroll(auth.enroll_token, key)))
        return refuse("bad_token", "the enrollment token is not valid (unknown, or used already)");
    }
    if (ws.readyState !== ws.OPEN) return undefined;
    ws.send(encodeFrame({ t: "welcome", enrolled: true }));
    return this.connected(ws, key, remoteAddress, socket);
  }

  private connected(ws: WebSocket, key: AgentKey, remoteAddress: string, socket: Corkable): ConnectedAgent {
    const agent = new ConnectedAgent(
      ws,
      key.publicKey,
      key.fingerprint,
      remoteAddress,
      async (a, event) => (await this.o.onEvent?.(a, event)) ?? 200,
      { heartbeatMs: this.o.heartbeatMs, deadAfterMs: this.o.deadAfterMs },
      socket,
    );
    const older = this.agents.get(key.fingerprint);
    this.agents.set(key.fingerprint, agent);
    older?.close(4409, "replaced by a newer connection of the same agent");
    void agent.closed.then(() => {
      if (this.agents.get(key.fingerprint) === agent) this.agents.delete(key.fingerprint);
    });
    this.o.onAgent?.(agent);
    for (const w of this.waiters.get(key.fingerprint) ?? []) w(agent);
    this.waiters.delete(key.fingerprint);
    return agent;
  }
}
