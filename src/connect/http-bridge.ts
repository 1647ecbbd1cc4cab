import { Duplex, Readable } from "node:stream";
import type { Server } from "../util/node-builtins.js";
import { CHUNK_BYTES, type Headers, INITIAL_WINDOW } from "./protocol.js";
import { ResponseReader } from "./response-reader.js";

/**
 * A connection in memory to the agent's own HTTP handling (connect/dispatch.ts): requests go in as
 * HTTP/1.1 bytes, which Node's parser reads as it reads a socket's; each answer comes out as the bytes
 * Node's server writes, read back by the request's `ResponseReader`. No port, no copy of the answer's body.
 */
export class MemorySocket extends Duplex {
  readonly remotePort = 0;
  readonly localAddress = "127.0.0.1";
  readonly localPort = 0;
  readonly encrypted = false;
  /** The reader of the answer under way; none between requests. */
  private reader: ResponseReader | undefined;
  /** The server's write waiting for the answer's reader to take more. */
  private held: (() => void) | undefined;

  constructor(readonly remoteAddress: string) {
    super({ allowHalfOpen: false });
    // The server has written its last (or the answer was read whole): the socket is done both ways. Node's
    // server ends a socket it keeps no longer, and only a socket that closes leaves its list of connections
    // and gives back its parser: without this, every request left its socket behind (about 4.5 KB each).
    this.once("finish", () => this.destroy());
  }

  /** The next request's answer is read by `reader`. */
  attach(reader: ResponseReader | undefined): void {
    this.reader = reader;
  }

  /** Whether `reader` reads the answer under way. */
  reads(reader: ResponseReader): boolean {
    return this.reader === reader;
  }

  override _read(): void {}

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (err?: Error | null) => void): void {
    const reader = this.reader;
    if (reader === undefined) {
      done(new Error("the agent's server wrote between answers"));
      return;
    }
    try {
      if (reader.feed(chunk)) done();
      else this.held = () => done();
    } catch (err) {
      done(err as Error);
    }
  }

  /** The answer's reader took what it had: the server may write on. */
  release(): void {
    const held = this.held;
    this.held = undefined;
    held?.();
  }

  override _final(done: (err?: Error | null) => void): void {
    this.reader?.close();
    done();
  }

  override _destroy(err: Error | null, done: (err: Error | null) => void): void {
    this.reader?.close();
    done(err);
  }

  // What Node's HTTP server asks of a socket beyond a Duplex.
  setTimeout(): this {
    return this;
  }
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
}

/** An HTTP token (RFC 9110, 5.6.2): a header's name, a method. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * A request's head as HTTP/1.1 bytes; throws on a name or value that would break the head's framing. A
 * request with a body closes its connection after it; one without leaves it open for the next.
 */
export function requestHead(method: string, path: string, headers: Headers, body: boolean): Buffer {
  const lines = [`${method} ${path} HTTP/1.1`];
  let host = false;
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    // Framing is the bridge's: the frames say whether a body follows.
    if (lower === "content-length" || lower === "transfer-encoding" || lower === "connection") continue;
    if (!TOKEN.test(name)) throw new Error(`header name ${JSON.stringify(name)}`);
    if (lower === "host") host = true;
    for (const one of [value].flat()) {
      if (/[\r\n\0]/.test(one)) throw new Error(`header ${name} holds a line break`);
      lines.push(`${name}: ${one}`);
    }
  }
  if (!TOKEN.test(method) || /[\s\0]/.test(path))
    throw new Error("the method or path would break the request line");
  if (!host) lines.push("host: localhost");
  lines.push(...(body ? ["connection: close", "transfer-encoding: chunked"] : ["content-length: 0"]), "", "");
  return Buffer.from(lines.join("\r\n"), "latin1");
}

/** A body's piece in chunked transfer coding (RFC 9112, 7.1); the empty piece ends the body. */
export function chunkOf(piece: Buffer): Buffer[] {
  if (piece.length === 0) return [Buffer.from("0\r\n\r\n")];
  return [Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from("\r\n")];
}

/** An answer from the agent's own HTTP handling: its head, and its body as it comes. */
export interface BridgedAnswer {
  status: number;
  headers: Headers;
  /** The body whole when its length said it is at most CHUNK_BYTES; else as it comes. */
  body: Buffer | Readable;
}

/** Idle sockets a bridge keeps for the next reads, at most: more than a connection mostly runs at once. */
const IDLE_SOCKETS = 16;

type BridgedRequest = {
  method: string;
  path: string;
  headers: Headers;
  body: AsyncIterable<Buffer> | undefined;
};

/**
 * One connection's way into the agent's own HTTP handling (`server`, which never listens), over sockets
 * in memory that `mark` is given first. A request without a body goes on a socket kept from an earlier one,
 * as an HTTP client keeps its connections alive: the server sets a connection up (its parser, listeners,
 * list entry) once, not per read. A request with a body gets a socket of its own, closed after it: an
 * answer may come before the body's end, and the rest of the body would be read as the next request.
 */
export class Bridge {
  private readonly idle: MemorySocket[] = [];
  private closed = false;

  constructor(
    private readonly server: Server,
    private readonly remoteAddress: string,
    private readonly mark: (socket: MemorySocket) => void,
  ) {}

  /**
   * Runs one request: resolves with the answer's head and its body streaming behind, or, for a body whose
   * length says it is small (most answers), with the answer whole once it is read, without a stream in
   * between. Rejects when the answer breaks off before that. `signal` aborts it as a client that goes away
   * does.
   */
  request(request: BridgedRequest, signal?: AbortSignal): Promise<BridgedAnswer> {
    const reuse = request.body === undefined;
    // Before any socket: a request whose head cannot be written leaves nothing behind in the server.
    let head: Buffer;
    try {
      head = requestHead(request.method, request.path, request.headers, !reuse);
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise((resolve, reject) => {
      const socket = this.socket(reuse);
      let body: Readable | undefined;
      let whole: { status: number; headers: Headers; pieces: Buffer[] } | undefined;
      const onAbort = () => {
        if (socket.reads(reader)) socket.destroy();
      };
      const reader: ResponseReader = new ResponseReader(
        {
          head: (status, headers) => {
            if (Number(headers["content-length"] ?? Number.NaN) <= CHUNK_BYTES) {
              whole = { status, headers, pieces: [] };
              return;
            }
            // As much buffered as a stream's window: the server writes on while the frames go out. A read
            // after the answer's end must not release the writes of the socket's next answer.
            body = new Readable({
              highWaterMark: INITIAL_WINDOW,
              read: () => {
                if (socket.reads(reader)) socket.release();
              },
            });
            resolve({ status, headers, body });
          },
          data: (piece) => {
            if (whole === undefined) return (body as Readable).push(piece);
            whole.pieces.push(piece);
            return true;
          },
          end: () => {
            signal?.removeEventListener("abort", onAbort);
            if (whole !== undefined) {
              const { status, headers, pieces } = whole;
              resolve({
                status,
                headers,
                body: pieces.length === 1 ? (pieces[0] as Buffer) : Buffer.concat(pieces),
              });
            } else body?.push(null);
            if (reuse && !reader.closing) this.keep(socket);
            else socket.end();
          },
          fail: (err) => {
            signal?.removeEventListener("abort", onAbort);
            if (body !== undefined) body.destroy(err);
            else reject(err);
          },
        },
        request.method === "HEAD",
      );
      socket.attach(reader);
      signal?.addEventListener("abort", onAbort, { once: true });
      socket.push(head);
      if (request.body !== undefined) void sendBody(socket, request.body);
    });
  }

  /** The connection is gone: its idle sockets close now, those in use with their requests. */
  close(): void {
    this.closed = true;
    for (const s of this.idle.splice(0)) s.destroy();
  }

  private socket(reuse: boolean): MemorySocket {
    const kept = reuse ? this.idle.pop() : undefined;
    if (kept !== undefined) return kept;
    const s = new MemorySocket(this.remoteAddress);
    s.on("error", () => {});
    s.once("close", () => {
      const i = this.idle.indexOf(s);
      if (i >= 0) this.idle.splice(i, 1);
    });
    this.mark(s);
    this.server.emit("connection", s);
    return s;
  }

  /** A socket whose answer was read whole, kept for the next request (or closed past IDLE_SOCKETS). */
  private keep(s: MemorySocket): void {
    s.attach(undefined);
    if (this.closed || s.destroyed || this.idle.length >= IDLE_SOCKETS) s.destroy();
    else this.idle.push(s);
  }
}

/** The request's body, in chunked coding, as the frames bring it. */
async function sendBody(socket: MemorySocket, body: AsyncIterable<Buffer>): Promise<void> {
  try {
    for await (const piece of body) {
      if (socket.destroyed) return;
      if (piece.length === 0) continue;
      for (const part of chunkOf(piece)) socket.push(part);
    }
    if (!socket.destroyed) for (const part of chunkOf(Buffer.alloc(0))) socket.push(part);
  } catch {
    socket.destroy();
  }
}
