import assert from "node:assert/strict";
import { connect } from "node:net";
import { after, before, describe, test } from "node:test";
import { TEST_TOKEN } from "../helpers/app.js";
import { type RawResponse, rawRequest, requestText } from "../helpers/raw-http.js";
import { startGuardedAgent } from "./support.js";

// Bodies over HOSTKEEPER_BODY_LIMIT, sent to the agent listening on loopback by a client that sends its
// whole body before it reads, as a plain client does, and that counts a reset as a failure.

const LIMIT = 1_048_576;
const BIG = 2_000_000;
const auth = { authorization: `Bearer ${TEST_TOKEN}` };

interface Upload {
  response: RawResponse | undefined;
  /** Body bytes the connection took. */
  sent: number;
  /** The socket error the client met (EPIPE, ECONNRESET), if any. */
  error: string | undefined;
}

function parse(buf: Buffer): (RawResponse & { complete: boolean }) | undefined {
  const end = buf.indexOf("\r\n\r\n");
  const m = /^HTTP\/1\.1 (\d{3})/.exec(buf.subarray(0, Math.max(end, 0)).toString("latin1"));
  if (end < 0 || !m) return undefined;
  const headers: Record<string, string> = {};
  for (const line of buf.subarray(0, end).toString("latin1").split("\r\n").slice(1)) {
    const i = line.indexOf(":");
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const length = Number(headers["content-length"]);
  const body = buf.subarray(end + 4);
  return {
    status: Number(m[1]),
    headers,
    body: body.subarray(0, length).toString("utf8"),
    complete: body.length >= length,
  };
}

/**
 * Sends `head` (which declares `size` bytes of body) and then the body: its first half, then, once the
 * answer has begun to arrive (so the server has answered a request whose body is still on its way), the
 * rest. Once the whole body is sent and the whole answer read, the client closes, as curl does. Unlike
 * rawRequest, which takes what arrived before a reset as the answer, a reset here is an error.
 */
async function upload(port: number, head: string, size: number, chunked = false): Promise<Upload> {
  // Half-open: the server may end its side after its answer while this client is still sending.
  const socket = connect({ host: "127.0.0.1", port, allowHalfOpen: true });
  const chunks: Buffer[] = [];
  let error: string | undefined;
  let sent = 0;
  socket.on("error", (err: NodeJS.ErrnoException) => {
    error ??= err.code ?? err.message;
  });
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  // Each resolves on its event, or when the connection is gone and it never will come.
  const signal = () => {
    let fire = () => {};
    const p = new Promise<void>((resolve) => {
      fire = resolve;
    });
    return { p: Promise.race([p, closed]), fire };
  };
  const firstBytes = signal();
  const wholeAnswer = signal();
  socket.on("data", (c: Buffer) => {
    chunks.push(c);
    firstBytes.fire();
    if (parse(Buffer.concat(chunks))?.complete) wholeAnswer.fire();
  });
  const timer = setTimeout(() => socket.destroy(new Error("no answer within 10 s")), 10_000);
  const write = async (n: number) => {
    const chunk = Buffer.alloc(65_536, "a");
    for (let left = n; left > 0 && !socket.destroyed; left -= chunk.length) {
      const piece = chunk.subarray(0, Math.min(left, chunk.length));
      const drained = signal();
      // Chunked: each piece framed as one chunk (its size in hex, the bytes, CRLF).
      const framed = chunked
        ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from("\r\n")])
        : piece;
      if (!socket.write(framed)) {
        socket.once("drain", drained.fire);
        await drained.p;
      }
      if (!socket.destroyed) sent += piece.length;
    }
  };
  try {
    socket.write(head);
    const half = Math.floor(size / 2);
    await write(half);
    await firstBytes.p;
    await write(size - half);
    if (chunked && !socket.destroyed) socket.write("0\r\n\r\n");
    await wholeAnswer.p;
    if (!socket.destroyed) socket.end();
    await closed;
  } finally {
    clearTimeout(timer);
    socket.destroy();
  }
  return { response: parse(Buffer.concat(chunks)), sent, error };
}

const head = (method: string, path: string, headers: Record<string, string>, size: number) =>
  requestText(method, path, { headers: { ...headers, "content-length": String(size) } });

function assertProblem(u: Upload, status: number, code: string): void {
  assert.equal(u.error, undefined, `the client met ${u.error} after sending ${u.sent} bytes`);
  assert.equal(u.sent, BIG, "the connection took the whole body");
  assert.equal(u.response?.status, status, u.response?.body);
  assert.match(u.response?.headers["content-type"] ?? "", /^application\/problem\+json/);
  const body = JSON.parse(u.response?.body ?? "");
  assert.equal(body.code, code);
  assert.equal(body.status, status);
}

describe("a body over the limit gets a problem the client can read", () => {
  const cleanups: (() => unknown)[] = [];
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  let port: number;
  before(async () => {
    const agent = await startGuardedAgent(
      { after: (fn: () => unknown) => cleanups.push(fn) },
      { HOSTKEEPER_BODY_LIMIT: String(LIMIT) },
    );
    port = agent.port;
  });

  for (const [what, headers] of [
    ["a JSON content type", { "content-type": "application/json" }],
    ["no content type", {}],
  ] as [string, Record<string, string>][])
    test(`GET with 2 MB of body and ${what}: 413 payload_too_large`, async () => {
      const u = await upload(port, head("GET", "/v1/proxy/routes", { ...auth, ...headers }, BIG), BIG);
      assertProblem(u, 413, "payload_too_large");
      assert.equal(
        JSON.parse(u.response?.body ?? "").detail,
        "the request body exceeds the configured limit",
      );
      assert.equal(u.response?.headers.connection, "close");
    });

  // A DELETE without a content type is a body Fastify does not parse either.
  for (const [method, path] of [
    ["GET", "/v1/proxy/routes"],
    ["DELETE", "/v1/proxy/routes/chunked.example.test"],
  ])
    test(`${method} with a chunked body over the limit: 413 payload_too_large once the limit is passed, not read to its end`, async () => {
      // The first half alone is over the limit: the answer must come before the client sends the rest.
      const size = 3 * LIMIT;
      const chunkedHead = requestText(method as string, path as string, {
        headers: { ...auth, "transfer-encoding": "chunked" },
      });
      const u = await upload(port, chunkedHead, size, true);
      assert.equal(u.error, undefined, `the client met ${u.error} after sending ${u.sent} bytes`);
      assert.equal(u.response?.status, 413, u.response?.body);
      assert.equal(JSON.parse(u.response?.body ?? "").code, "payload_too_large");
      assert.equal(u.response?.headers.connection, "close");
    });

  test("GET with a small chunked body: read, ignored, answered", async () => {
    const res = await rawRequest(
      port,
      `GET /v1/proxy/routes HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\nauthorization: ${auth.authorization}\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`,
    );
    assert.equal(res.status, 200, res.body);
    assert.deepEqual(JSON.parse(res.body), []);
  });

  test("POST with 2 MB of JSON: 413 payload_too_large", async () => {
    const u = await upload(
      port,
      head("POST", "/v1/proxy/routes", { ...auth, "content-type": "application/json" }, BIG),
      BIG,
    );
    assertProblem(u, 413, "payload_too_large");
  });

  test("without a token, 2 MB of body: 401 first, as for any other request", async () => {
    const u = await upload(port, head("GET", "/v1/proxy/routes", {}, BIG), BIG);
    assertProblem(u, 401, "unauthorized");
  });

  test("a small body on a GET is still ignored", async () => {
    for (const headers of [{ "content-type": "application/json" }, {}] as Record<string, string>[]) {
      const res = await rawRequest(
        port,
        requestText("GET", "/v1/proxy/routes", { headers: { ...auth, ...headers }, body: "{}" }),
      );
      assert.equal(res.status, 200, res.body);
      assert.deepEqual(JSON.parse(res.body), []);
    }
  });

  test("a GET declaring exactly the limit is not refused for its size", async () => {
    const res = await rawRequest(
      port,
      requestText("GET", "/v1/proxy/routes", { headers: auth, body: "a".repeat(LIMIT) }),
    );
    assert.equal(res.status, 200, res.body);
  });
});
