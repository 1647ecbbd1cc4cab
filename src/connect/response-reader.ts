import type { Headers } from "./protocol.js";

/**
 * The answers of the agent's own HTTP handling as the bridge (connect/http-bridge.ts) reads them back: Node's
 * HTTP/1.1 answer from the bytes its server wrote to a socket in memory.
 */

export interface ResponseEvents {
  head(status: number, headers: Headers): void;
  /** False: the reader wants no more for now. */
  data(piece: Buffer): boolean;
  end(): void;
  /** The answer stopped before its end (the server closed, or wrote what is not HTTP). */
  fail(err: Error): void;
}

/**
 * Reads Node's HTTP/1.1 answer from the bytes its server wrote: the head, then the body by its
 * `content-length`, its chunked coding, or (neither) to the connection's end.
 */
export class ResponseReader {
  private pending: Buffer = Buffer.alloc(0);
  private state: "head" | "length" | "chunk-size" | "chunk" | "chunk-crlf" | "chunk-end" | "close" | "done" =
    "head";
  private remaining = 0;
  private more = true;
  /** The server said it closes the connection after this answer. */
  closing = false;

  /** `bodiless`: an answer to HEAD, whose head announces a body that never comes. */
  constructor(
    private readonly on: ResponseEvents,
    private readonly bodiless = false,
  ) {}

  /** Reads what came; false when the body's reader wants no more for now (`MemorySocket.release` then). */
  feed(bytes: Buffer): boolean {
    this.pending = this.pending.length === 0 ? bytes : Buffer.concat([this.pending, bytes]);
    this.more = true;
    while (this.step()) {}
    // An answer read whole holds up no write of the server's: what it had is with its reader.
    return this.more || this.state === "done";
  }

  close(): void {
    if (this.state === "close") {
      this.state = "done";
      this.on.end();
    } else if (this.state !== "done") {
      this.state = "done";
      this.on.fail(new Error("the agent closed its answer before its end"));
    }
  }

  /** One step of reading; false when it needs more bytes. */
  private step(): boolean {
    const p = this.pending;
    switch (this.state) {
      case "head": {
        const end = p.indexOf("\r\n\r\n");
        if (end < 0) return false;
        this.readHead(p.toString("latin1", 0, end));
        this.pending = p.subarray(end + 4);
        return true;
      }
      case "length":
        if (p.length === 0) return false;
        this.take(p);
        if (this.remaining === 0) this.finish();
        return true;
      case "chunk-size": {
        const eol = p.indexOf("\r\n");
        if (eol < 0) return false;
        const size = Number.parseInt(p.toString("latin1", 0, eol).split(";")[0] ?? "", 16);
        if (!Number.isFinite(size)) throw new Error("a chunk size that is not one");
        this.pending = p.subarray(eol + 2);
        this.remaining = size;
        this.state = size === 0 ? "chunk-end" : "chunk";
        return true;
      }
      case "chunk":
        if (p.length === 0) return false;
        this.take(p);
        if (this.remaining === 0) this.state = "chunk-crlf";
        return true;
      case "chunk-end": {
        // Trailers, if any, then the empty line.
        const end = p.indexOf("\r\n");
        if (end < 0) return false;
        this.pending = p.subarray(end + 2);
        if (end === 0) this.finish();
        return true;
      }
      case "close":
        if (p.length === 0) return false;
        this.pending = Buffer.alloc(0);
        this.more = this.on.data(p) && this.more;
        return true;
      case "chunk-crlf":
        if (p.length < 2) return false;
        this.pending = p.subarray(2);
        this.state = "chunk-size";
        return true;
      default:
        return false;
    }
  }

  /** Hands the body's bytes in `p`, up to what remains of the body or the chunk, to the reader. */
  private take(p: Buffer): void {
    const piece = p.subarray(0, this.remaining);
    this.remaining -= piece.length;
    this.pending = p.subarray(piece.length);
    this.more = this.on.data(piece) && this.more;
  }

  private readHead(text: string): void {
    const [statusLine = "", ...lines] = text.split("\r\n");
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1]);
    if (!Number.isInteger(status)) throw new Error("an answer without a status line");
    const headers: Headers = {};
    let length: number | undefined;
    let chunked = false;
    for (const line of lines) {
      const colon = line.indexOf(":");
      const name = line.slice(0, colon).toLowerCase();
      const value = line.slice(colon + 1).trim();
      if (name === "content-length") length = Number(value);
      if (name === "transfer-encoding") chunked = /chunked/i.test(value);
      if (name === "connection" && /\bclose\b/i.test(value)) this.closing = true;
      // Hop by hop: the connection in memory's, not the answer's.
      if (name === "connection" || name === "transfer-encoding" || name === "keep-alive") continue;
      const had = headers[name];
      headers[name] = had === undefined ? value : [...[had].flat(), value];
    }
    this.on.head(status, headers);
    if (this.bodiless || status === 204 || status === 304 || status < 200) this.finish();
    else if (chunked) this.state = "chunk-size";
    else if (length !== undefined) {
      this.remaining = length;
      this.state = "length";
      if (length === 0) this.finish();
    } else this.state = "close";
  }

  private finish(): void {
    this.state = "done";
    this.on.end();
  }
}
