import { buffer } from "node:stream/consumers";
import type { Logger } from "pino";
import type { Principal } from "../access/tokens.js";
import { ApiError, problemBody } from "../http/errors.js";
import type { Server } from "../util/node-builtins.js";
import { Bridge } from "./http-bridge.js";
import { markConnectionSocket } from "./principal.js";
import { CHUNK_BYTES, type Headers, ProtocolError, type StreamFrame } from "./protocol.js";
import type { KeptAnswer, ReplayCache } from "./replay.js";
import { type FrameSink, IncomingBody, OutgoingBody } from "./streams.js";

export interface DispatchOptions {
  /** The agent's own HTTP handling, on a server that never listens (connect/client.ts). */
  server: Server;
  /** The control plane's key fingerprint: whose request ids these are. */
  peer: string;
  /** What the connection's requests act as (connect/principal.ts): the control plane, with its scopes. */
  principal: Principal;
  remoteAddress: string;
  replay: ReplayCache;
  sink: FrameSink;
  log: Logger;
  /** Every request still running in the agent, of every connection: the agent's stop waits for them. */
  running: Set<Promise<unknown>>;
}

/** Methods that change nothing: run again when sent again, streamed, and stopped by `cancel`. */
const SAFE = new Set(["GET", "HEAD"]);

interface Active {
  safe: boolean;
  body: IncomingBody | undefined;
  bodyDone: boolean;
  out: OutgoingBody | undefined;
  abort: AbortController;
}

type RequestFrame = Extract<StreamFrame, { t: "req" }>;
type Request = { method: string; path: string; headers: Headers; body: IncomingBody | undefined };

/**
 * The requests of one connection, each run through the agent's own HTTP handling over a socket in memory
 * (connect/http-bridge.ts): the same parser, edge,
 * validation, scopes (the connection's), audit and limits as a request on its port. Reads stream their
 * answer as it is produced; a change is answered whole, kept by its id for the replay cache, and runs to
 * its end even when the connection goes (docs/connect.md, "Requests").
 */
export class Dispatcher {
  private readonly active = new Map<string, Active>();
  private readonly bridge: Bridge;

  constructor(private readonly o: DispatchOptions) {
    const principal = o.principal;
    this.bridge = new Bridge(o.server, o.remoteAddress, (socket) => markConnectionSocket(socket, principal));
  }

  get inFlight(): number {
    return this.active.size;
  }

  /** One stream frame from the control plane; throws ProtocolError on a frame that breaks the protocol. */
  onFrame(header: StreamFrame, body: Buffer): void {
    if (header.t === "req") {
      this.start(header);
      return;
    }
    const a = this.active.get(header.id);
    if (a === undefined) return; // a stream that ended or was cancelled meanwhile
    switch (header.t) {
      case "data":
        if (a.body === undefined || a.bodyDone) throw new ProtocolError(`data after the end of ${header.id}`);
        if (!a.body.add(body)) throw new ProtocolError(`${header.id} sent past its window`);
        return;
      case "end":
        a.bodyDone = true;
        a.body?.finish();
        return;
      case "win":
        a.out?.grant(header.bytes);
        return;
      case "cancel":
        // A change, once started, runs to its end; only the sending of its answer stops.
        if (a.safe) a.abort.abort();
        a.out?.stop();
        this.active.delete(header.id);
        return;
      default:
        throw new ProtocolError(`a ${header.t} frame from the control plane`);
    }
  }

  /** The connection is gone: reads stop, changes run on, their answers kept for the same id sent again. */
  close(): void {
    for (const [id, a] of this.active) {
      a.out?.stop();
      if (a.safe) a.abort.abort();
      if (!a.bodyDone) {
        a.body?.destroy(new Error("the connection closed before the request's body was all sent"));
        if (!a.safe) this.o.replay.forget(this.o.peer, id);
      }
    }
    this.active.clear();
    this.bridge.close();
  }

  private start(f: RequestFrame): void {
    if (this.active.has(f.id)) throw new ProtocolError(`request id ${f.id} is already in flight`);
    if (typeof f.path !== "string" || !f.path.startsWith("/") || typeof f.method !== "string")
      throw new ProtocolError(`request ${f.id} has no method or path`);
    if (!validHeaders(f.headers))
      throw new ProtocolError(`request ${f.id}'s headers are not strings by name`);
    const method = f.method.toUpperCase();
    const safe = SAFE.has(method);
    const kept = safe ? undefined : this.o.replay.find(this.o.peer, f.id);
    const a: Active = {
      safe,
      body: f.body ? new IncomingBody(f.id, this.o.sink) : undefined,
      bodyDone: !f.body,
      out: undefined,
      abort: new AbortController(),
    };
    this.active.set(f.id, a);
    if (kept !== undefined) {
      // The body of a request sent again is read and dropped: the first run's answer stands.
      a.body?.resume();
      const answer =
        kept.method === method && kept.path === f.path ? kept.answer : Promise.resolve(idReused(f.id, kept));
      answer.then(
        (k) => this.sendKept(f.id, a, k),
        (err: unknown) => {
          this.fail(f.id, err);
          this.done(f.id, a);
        },
      );
      return;
    }
    const request = { method, path: f.path, headers: f.headers, body: a.body };
    if (safe) this.read(f.id, a, request);
    else this.change(f, a, request);
  }

  private bridged(request: Request, signal?: AbortSignal) {
    return this.bridge.request(request, signal);
  }

  private read(id: string, a: Active, request: Request): void {
    const run = this.bridged(request, a.abort.signal)
      .then(async (res) => {
        if (this.active.get(id) !== a) {
          if (!Buffer.isBuffer(res.body)) res.body.destroy();
          return;
        }
        const headers = res.headers;
        // An answer read whole (small, as most answers are) goes in one frame.
        if (Buffer.isBuffer(res.body)) {
          if (this.o.sink.open)
            this.o.sink.send({ t: "res", id, status: res.status, headers, end: true }, res.body);
          return;
        }
        this.o.sink.send({ t: "res", id, status: res.status, headers });
        a.out = new OutgoingBody(id, this.o.sink);
        const body = res.body;
        // Stopped (cancelled, or the connection gone): the rest of the answer is not produced for nobody.
        if (!(await a.out.pump(body))) body.destroy();
      })
      .catch((err: unknown) => this.fail(id, err))
      .finally(() => this.done(id, a));
    this.track(run);
  }

  private track(run: Promise<unknown>): void {
    this.o.running.add(run);
    void run.finally(() => this.o.running.delete(run)).catch(() => {});
  }

  private change(f: RequestFrame, a: Active, request: Request): void {
    const answer = this.bridged(request).then(
      async (res): Promise<KeptAnswer> => ({
        status: res.status,
        headers: res.headers,
        body: Buffer.isBuffer(res.body) ? res.body : await buffer(res.body),
      }),
    );
    this.o.replay.remember(this.o.peer, f.id, f.method.toUpperCase(), f.path, answer);
    this.track(answer);
    answer.then(
      (k) => this.sendKept(f.id, a, k),
      (err: unknown) => {
        // Kept failed: whatever the run did, its id is not run again (sent again, it is aborted again).
        this.fail(f.id, err);
        this.done(f.id, a);
      },
    );
  }

  private sendKept(id: string, a: Active, k: KeptAnswer): void {
    if (this.active.get(id) !== a || !this.o.sink.open) return;
    if (k.body.length <= CHUNK_BYTES) {
      this.o.sink.send({ t: "res", id, status: k.status, headers: k.headers, end: true }, k.body);
      this.done(id, a);
      return;
    }
    this.o.sink.send({ t: "res", id, status: k.status, headers: k.headers });
    a.out = new OutgoingBody(id, this.o.sink);
    a.out
      .pump([k.body])
      .catch((err: unknown) => this.fail(id, err))
      .finally(() => this.done(id, a));
  }

  private fail(id: string, err: unknown): void {
    if (!this.o.sink.open || !this.active.has(id)) return;
    this.o.log.warn({ err, request: id }, "a request over the connection failed");
    this.o.sink.send({ t: "abort", id, reason: (err as Error)?.message ?? String(err) });
  }

  private done(id: string, a: Active): void {
    if (this.active.get(id) === a) this.active.delete(id);
  }
}

function validHeaders(h: unknown): h is Record<string, string | string[]> {
  if (typeof h !== "object" || h === null || Array.isArray(h)) return false;
  return Object.values(h).every(
    (v) => typeof v === "string" || (Array.isArray(v) && v.every((one) => typeof one === "string")),
  );
}

/** The answer to an id sent again for another request than its first: a problem, nothing run. */
function idReused(id: string, kept: { method: string; path: string }): KeptAnswer {
  const problem = new ApiError(
    "request_id_reused",
    `request id ${id} was used for ${kept.method} ${kept.path} within the last 10 minutes; a new request needs a new id`,
  );
  return {
    status: problem.status,
    headers: { "content-type": "application/problem+json; charset=utf-8" },
    body: Buffer.from(JSON.stringify(problemBody(problem))),
  };
}
