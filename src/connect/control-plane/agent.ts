import { randomUUID } from "node:crypto";
import type { Readable } from "node:stream";
import type WebSocket from "ws";
import { keepAlive } from "../heartbeat.js";
import type { Frame, Headers, StreamFrame } from "../protocol.js";
import { type Corkable, type FrameSink, FrameWriter, IncomingWebBody, OutgoingBody } from "../streams.js";

/** What `fetch` takes: a subset of the Fetch API's RequestInit, and the request's id. */
export interface AgentRequestInit {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array | Readable | null;
  /**
   * The request's id, unique per request. Sent again with the same id after a reconnect (within 10 minutes), a
   * change is answered from its first run and never run twice. Default: a new UUID.
   */
  id?: string;
  signal?: AbortSignal;
}

/** An event the agent sent over the connection: the body and headers of the same webhook over HTTP. */
export interface AgentEvent {
  /** The outbox's event id (`webhook-id`): the idempotency key, the same across redeliveries. */
  id: string;
  headers: Headers;
  body: Buffer;
  type: string;
  data: unknown;
}

interface Pending {
  resolve: (res: Response) => void;
  reject: (err: Error) => void;
  response: IncomingWebBody | undefined;
  request: OutgoingBody | undefined;
  detach?: () => void;
}

/** Statuses whose responses have no body (the Fetch API refuses one). */
const NULL_BODY = new Set([101, 204, 205, 304]);

/**
 * One agent connected to the control plane, its key proven: `fetch` calls the agent's API over the
 * connection (any path of the API, as over HTTP, without a token: the agent applies the scopes it gave the
 * connection), and its events arrive through the control plane's `onEvent`.
 */
export class ConnectedAgent implements FrameSink {
  readonly connectedAt = new Date();
  private readonly pending = new Map<string, Pending>();
  private readonly writer: FrameWriter;
  /** Settles when the connection closes, with why. */
  readonly closed: Promise<string>;

  constructor(
    private readonly ws: WebSocket,
    /** The agent's public key, base64 of its 32 bytes. */
    readonly publicKey: string,
    /** `SHA256:...` of the public key, as `hostkeeper connect show` prints it. */
    readonly fingerprint: string,
    readonly remoteAddress: string,
    private readonly onEvent: (agent: ConnectedAgent, event: AgentEvent) => Promise<number>,
    timing: { heartbeatMs?: number | undefined; deadAfterMs?: number | undefined } = {},
    /** The WebSocket's own socket, on which the frames of one turn are gathered into one write. */
    socket?: Corkable,
  ) {
    this.writer = new FrameWriter(ws, socket);
    this.closed = new Promise((resolve) =>
      ws.once("close", (code, reason) => {
        const why = `closed (${code}${reason.length > 0 ? `: ${reason}` : ""})`;
        for (const [id, p] of this.pending)
          this.failPending(id, p, new Error(`the agent's connection ${why}`));
        this.writer.release();
        resolve(why);
      }),
    );
    keepAlive(ws, { everyMs: timing.heartbeatMs, deadAfterMs: timing.deadAfterMs });
  }

  get open(): boolean {
    return this.ws.readyState === this.ws.OPEN;
  }

  /** Requests in flight on this connection. */
  get inFlight(): number {
    return this.pending.size;
  }

  /**
   * Calls the agent's API, as `fetch` would over HTTP: resolves with the answer once its status and headers
   * arrive, the body streaming behind them; rejects when the connection closes first (send it again with
   * the same `id` once the agent is back), and with an AbortError on `signal`.
   */
  fetch(path: string, init: AgentRequestInit = {}): Promise<Response> {
    const id = init.id ?? randomUUID();
    if (!this.open) return Promise.reject(new Error("the agent is not connected"));
    if (this.pending.has(id)) return Promise.reject(new Error(`request id ${id} is already in flight`));
    return new Promise<Response>((resolve, reject) => {
      const p: Pending = { resolve, reject, response: undefined, request: undefined };
      this.pending.set(id, p);
      const body = init.body ?? null;
      const headers: Headers = { ...(init.headers ?? {}) };
      this.send({ t: "req", id, method: init.method ?? "GET", path, headers, body: body !== null });
      if (body !== null) {
        p.request = new OutgoingBody(id, this);
        const source = typeof body === "string" || body instanceof Uint8Array ? [body] : body;
        p.request.pump(source).catch((err: unknown) => this.failPending(id, p, err as Error));
      }
      const signal = init.signal;
      if (signal) {
        const onAbort = () => {
          if (this.pending.get(id) !== p) return;
          if (this.open) this.send({ t: "cancel", id });
          this.failPending(id, p, new DOMException("the request was aborted", "AbortError"));
        };
        signal.addEventListener("abort", onAbort, { once: true });
        // A signal shared by many requests keeps no listener of those that ended.
        p.detach = () => signal.removeEventListener("abort", onAbort);
      }
    });
  }

  close(code = 1000, reason = "closed by the control plane"): void {
    this.ws.close(code, reason);
  }

  send(header: Frame, body?: Uint8Array): void {
    this.writer.write(header, body);
  }

  drained(): Promise<void> {
    return this.writer.drained(this.open);
  }

  /** One frame from the agent after the handshake (control-plane/index.ts hands them here). */
  onFrame(f: StreamFrame, body: Buffer): void {
    if (f.t === "event") {
      void this.acknowledge(f.id, f.headers, body);
      return;
    }
    const p = this.pending.get(f.id);
    if (p === undefined) return;
    switch (f.t) {
      case "res":
        this.answer(f, p, body);
        return;
      case "data":
        if (!p.response?.add(body)) this.failPending(f.id, p, new Error("the agent sent past its window"));
        return;
      case "end":
        p.response?.finish();
        this.forget(f.id, p);
        return;
      case "win":
        p.request?.grant(f.bytes);
        return;
      case "abort":
        this.failPending(f.id, p, new Error(`the agent could not answer: ${f.reason}`));
        return;
      default:
        return;
    }
  }

  private answer(f: Extract<StreamFrame, { t: "res" }>, p: Pending, body: Buffer): void {
    const headers = new globalThis.Headers();
    for (const [k, v] of Object.entries(f.headers)) for (const one of [v].flat()) headers.append(k, one);
    if (f.end === true) {
      // The whole answer in this one frame.
      this.forget(f.id, p);
      p.request?.stop();
      p.resolve(new Response(NULL_BODY.has(f.status) ? null : body, { status: f.status, headers }));
      return;
    }
    if (NULL_BODY.has(f.status)) {
      p.resolve(new Response(null, { status: f.status, headers }));
      // Nothing comes for it but its end.
      p.response = new IncomingWebBody(f.id, this);
      return;
    }
    p.response = new IncomingWebBody(f.id, this);
    p.resolve(
      new Response(p.response.stream as ConstructorParameters<typeof Response>[0], {
        status: f.status,
        headers,
      }),
    );
  }

  private forget(id: string, p: Pending): void {
    this.pending.delete(id);
    p.detach?.();
  }

  private failPending(id: string, p: Pending, err: Error): void {
    this.forget(id, p);
    p.request?.stop();
    if (p.response) p.response.destroy(err);
    else p.reject(err);
  }

  private async acknowledge(id: string, headers: Headers, body: Buffer): Promise<void> {
    let status: number;
    try {
      const parsed = JSON.parse(body.toString("utf8")) as { type?: unknown; data?: unknown };
      status = await this.onEvent(this, {
        id,
        headers,
        body,
        type: typeof parsed.type === "string" ? parsed.type : "",
        data: parsed.data,
      });
    } catch {
      status = 500;
    }
    if (this.open) this.send({ t: "ack", id, status });
  }
}
