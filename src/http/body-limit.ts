import { Socket } from "node:net";
import type { Readable } from "node:stream";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { payloadTooLarge } from "./errors.js";

/**
 * How long a connection that closes after its answer keeps reading what the client still sends (and
 * dropping it) before it is torn down whatever comes: long enough for a body of a few megabytes to finish
 * on a slow link, short enough that a client streaming without end holds a connection for seconds only.
 */
const LINGER_MS = 5_000;

/**
 * Bodies over the limit, on every method, and answers that go out before the body is in.
 *
 * Fastify enforces `bodyLimit` only where it parses a body: a GET (or HEAD) with a body over the limit
 * reached its handler, which never read it. Here a Content-Length over the route's limit is refused with the
 * 413 of a POST, after the token and scope checks like every other answer, before anything reads the body.
 * A body of no declared length (chunked) that Fastify will not parse is read here up to the limit and
 * refused with the same 413 as soon as it passes it, rather than drained to its end after the answer.
 *
 * An answer that closes the connection (a 413, or any answer to a client that sent `Connection: close`)
 * while the body is still arriving would be lost: Node's server destroys the socket once the answer is
 * flushed, and the kernel answers the bytes the client still sends with a reset, which discards the
 * answer unread in the client's buffer. Such a connection closes in stages instead (RFC 9112 section
 * 9.6): it ends its side after the answer, reads and drops what the client still sends, and closes when
 * the client does, or after LINGER_MS.
 */
export function limitRequestBodies(app: FastifyInstance): void {
  app.addHook("preParsing", async (request, _reply, payload) => {
    const declared = Number(request.headers["content-length"]);
    const limit = request.routeOptions.bodyLimit;
    if (declared > limit) throw payloadTooLarge();
    if (request.headers["transfer-encoding"] !== undefined && !parsedByFastify(request))
      await readUpTo(payload, limit);
    return payload;
  });
  app.addHook("onSend", async (request, _reply, payload) => {
    const socket = request.raw.socket;
    if (!request.raw.complete && socket instanceof Socket) lingerOnClose(socket);
    return payload;
  });
}

/** Whether Fastify reads the request's body (and enforces the limit on it): its rule by method. */
function parsedByFastify(request: FastifyRequest): boolean {
  const m = request.method;
  if (m === "GET" || m === "HEAD") return false;
  if (m === "DELETE" || m === "OPTIONS") return request.headers["content-type"] !== undefined;
  return true;
}

/**
 * Reads a body nobody else will, to its end; rejects with the 413 as soon as it holds more than `limit`
 * bytes. The stream is left flowing, not destroyed: what the client still sends is dropped while the answer
 * goes out (destroying it would reset the connection under the answer).
 */
function readUpTo(body: Readable, limit: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let size = 0;
    const done = () => {
      body.off("data", onData);
      body.off("end", onEnd);
      body.off("error", onError);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) return;
      done();
      reject(payloadTooLarge());
    };
    const onEnd = () => {
      done();
      resolve();
    };
    const onError = (err: Error) => {
      done();
      reject(err);
    };
    body.on("data", onData);
    body.once("end", onEnd);
    body.once("error", onError);
  });
}

/**
 * Replaces the one call Node's HTTP server makes to close a connection after its last answer
 * (`destroySoon`: end, then destroy as soon as the end is flushed) with a close that reads on.
 */
function lingerOnClose(socket: Socket): void {
  socket.destroySoon = () => {
    if (socket.writable) socket.end();
    const timer = setTimeout(() => socket.destroy(), LINGER_MS);
    timer.unref();
    socket.once("close", () => clearTimeout(timer));
  };
}
