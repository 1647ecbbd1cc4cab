import type { KeyObject } from "node:crypto";
import type { Logger } from "pino";
import type WebSocket from "ws";
import type { Dispatcher } from "./dispatch.js";
import { keepAlive } from "./heartbeat.js";
import {
  DEAD_AFTER_MS,
  decodeMessage,
  type Frame,
  fingerprintOf,
  HANDSHAKE_MS,
  type Headers,
  newNonce,
  ProtocolError,
  type RefusalCode,
  type StreamFrame,
  signTranscript,
  transcript,
  verifyTranscript,
} from "./protocol.js";
import { type Corkable, type FrameSink, FrameWriter } from "./streams.js";

/** What the connection has carried, across reconnects (status and metrics). */
export interface Counters {
  framesIn: number;
  framesOut: number;
  bytesIn: number;
  bytesOut: number;
}

export interface SessionOptions {
  publicKey: string;
  privateKey: KeyObject;
  /** The pinned control-plane keys, by their base64. */
  pinned: ReadonlyMap<string, KeyObject>;
  /** Presented until the control plane has accepted it once. */
  enrollToken: string | undefined;
  /** The TLS connection's binding as this side sees it (protocol.ts, channelBinding). */
  binding: string;
  /** The WebSocket's own socket, on which the frames of one turn are gathered into one write. */
  socket?: Corkable;
  agentVersion: string;
  counters: Counters;
  log: Logger;
  heartbeatMs?: number;
  deadAfterMs?: number;
  /** The control plane proved its key and accepted the agent: the dispatcher of its requests. */
  welcomed(controlPlane: string, enrolled: boolean, sink: FrameSink): Dispatcher;
}

/** Why the session refused or lost its peer, for the log and the status. */
export class SessionError extends Error {}

/**
 * One connection to the control plane, from the WebSocket's opening to its close: the handshake
 * (docs/connect.md), then the control plane's requests through the dispatcher and the agent's events with
 * their acknowledgements, with a heartbeat both ways. `ended` settles with why it closed.
 */
export class AgentSession implements FrameSink {
  private phase: "challenge" | "welcome" | "open" | "closed" = "challenge";
  private readonly nonce = newNonce();
  private controlPlaneKey = "";
  private dispatcher: Dispatcher | undefined;
  private readonly acks = new Map<string, (status: number) => void>();
  private readonly writer: FrameWriter;
  private readonly timers: NodeJS.Timeout[] = [];
  private why: string | undefined;
  /** The control plane's code when it refused the agent. */
  refusal: RefusalCode | undefined;
  readonly ended: Promise<string>;

  constructor(
    private readonly ws: WebSocket,
    private readonly o: SessionOptions,
  ) {
    this.writer = new FrameWriter(ws, o.socket);
    // A frame's head and large body come as fragments of their own: not joined into one copy.
    ws.binaryType = "fragments";
    this.ended = new Promise((resolve) => {
      ws.once("close", (code, reason) => {
        this.finish();
        resolve(this.why ?? `the connection closed (${code}${reason.length > 0 ? `: ${reason}` : ""})`);
      });
    });
    ws.on("message", (data, isBinary) => this.onMessage(data as Buffer, isBinary));
    const handshake = setTimeout(
      () => this.fail(`the control plane did not finish the handshake within ${HANDSHAKE_MS / 1000} s`, 4408),
      HANDSHAKE_MS,
    );
    this.timers.push(handshake);
    this.send({
      t: "hello",
      v: 1,
      key: o.publicKey,
      nonce: this.nonce,
      binding: o.binding,
      agent_version: o.agentVersion,
    });
  }

  get open(): boolean {
    return this.phase === "open" && this.ws.readyState === this.ws.OPEN;
  }

  /** The control plane's key fingerprint once it proved it. */
  get controlPlane(): string | undefined {
    return this.controlPlaneKey === "" ? undefined : fingerprintOf(this.controlPlaneKey);
  }

  send(header: Frame, body?: Uint8Array): void {
    this.o.counters.framesOut++;
    this.o.counters.bytesOut += this.writer.write(header, body);
  }

  drained(): Promise<void> {
    return this.writer.drained(this.phase !== "closed");
  }

  /** Sends an event and resolves with the status the control plane acknowledged it with. */
  deliver(id: string, headers: Headers, body: Buffer, timeoutMs: number): Promise<number> {
    if (!this.open) return Promise.reject(new SessionError("not connected to the control plane"));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.acks.delete(id);
        reject(new SessionError(`the control plane did not acknowledge within ${timeoutMs} ms`));
      }, timeoutMs);
      this.acks.set(id, (status) => {
        clearTimeout(timer);
        this.acks.delete(id);
        if (status === 0) reject(new SessionError("the connection closed before the acknowledgement"));
        else resolve(status);
      });
      this.send({ t: "event", id, headers }, body);
    });
  }

  close(code = 1001, reason = "the agent is stopping"): void {
    if (this.ws.readyState === this.ws.OPEN || this.ws.readyState === this.ws.CONNECTING)
      this.ws.close(code, reason);
    // A peer that does not answer the close is not waited for.
    const t = setTimeout(() => this.ws.terminate(), 2000);
    t.unref();
    this.timers.push(t);
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    this.o.counters.framesIn++;
    try {
      if (!isBinary) throw new ProtocolError("a text message; frames are binary");
      const { header, body, bytes } = decodeMessage(data);
      this.o.counters.bytesIn += bytes;
      if (this.phase === "challenge") this.onChallenge(header);
      else if (this.phase === "welcome") this.onWelcome(header);
      else if (this.phase === "open") this.onStream(header as StreamFrame, body);
    } catch (err) {
      if (err instanceof ProtocolError || err instanceof SessionError)
        this.fail(`the control plane broke the protocol: ${err.message}`, 4400);
      else throw err;
    }
  }

  private onChallenge(f: Frame): void {
    if (f.t === "refused") {
      this.refusal = f.code;
      this.fail(`the control plane refused the agent: ${f.reason}`, 1000);
      return;
    }
    if (f.t !== "challenge") throw new ProtocolError(`expected a challenge, got ${f.t}`);
    const key = this.o.pinned.get(f.key);
    if (key === undefined) {
      this.fail(
        `the control plane's key ${fingerprintOf(f.key)} is not pinned (HOSTKEEPER_CONNECT_KEYS); not talking to it`,
        4403,
      );
      return;
    }
    const t = {
      agentKey: this.o.publicKey,
      controlPlaneKey: f.key,
      agentNonce: this.nonce,
      controlPlaneNonce: f.nonce,
      binding: this.o.binding,
    };
    if (!verifyTranscript(key, transcript("control-plane", t), f.sig)) {
      this.fail("the control plane's handshake signature does not verify with its pinned key", 4403);
      return;
    }
    this.controlPlaneKey = f.key;
    this.phase = "welcome";
    this.send({
      t: "auth",
      sig: signTranscript(this.o.privateKey, transcript("agent", t)),
      ...(this.o.enrollToken ? { enroll_token: this.o.enrollToken } : {}),
    });
  }

  private onWelcome(f: Frame): void {
    if (f.t === "refused") {
      this.refusal = f.code;
      this.fail(`the control plane refused the agent: ${f.reason}`, 1000);
      return;
    }
    if (f.t !== "welcome") throw new ProtocolError(`expected welcome, got ${f.t}`);
    for (const t of this.timers.splice(0)) clearTimeout(t);
    this.phase = "open";
    this.dispatcher = this.o.welcomed(fingerprintOf(this.controlPlaneKey), f.enrolled === true, this);
    const deadAfter = this.o.deadAfterMs ?? DEAD_AFTER_MS;
    keepAlive(this.ws, { everyMs: this.o.heartbeatMs, deadAfterMs: deadAfter }, () => {
      this.why = `the control plane was silent for ${Math.round(deadAfter / 1000)} s`;
    });
  }

  private onStream(f: StreamFrame, body: Buffer): void {
    if (f.t === "ack") {
      this.acks.get(f.id)?.(typeof f.status === "number" && f.status > 0 ? f.status : 500);
      return;
    }
    this.dispatcher?.onFrame(f, body);
  }

  private fail(why: string, code: number): void {
    this.why ??= why;
    this.o.log.warn({ reason: why }, "connection to the control plane ended");
    this.close(code, why.slice(0, 120));
  }

  private finish(): void {
    if (this.phase === "closed") return;
    this.phase = "closed";
    for (const t of this.timers.splice(0)) clearTimeout(t);
    this.dispatcher?.close();
    for (const ack of [...this.acks.values()]) ack(0);
    this.writer.release();
  }
}
