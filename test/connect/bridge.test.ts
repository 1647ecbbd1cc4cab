/**
 * The bridge from the connection's requests to the agent's own HTTP handling (src/connect/http-bridge.ts),
 * against Node's HTTP server: reads reuse the sockets in memory of earlier reads, as a client keeps its
 * connections alive; every socket the bridge lets go of closes, so that the server lets go of it too (its
 * list of connections, its parser). Before, none closed, and each request over the connection left about
 * 4.5 KB behind in the agent.
 */
import assert from "node:assert/strict";
import http from "node:http";
import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { test } from "node:test";
import { Bridge, type MemorySocket } from "../../src/connect/http-bridge.js";

function counted(handler: http.RequestListener) {
  const server = http.createServer(handler);
  const sockets = { opened: 0, closed: 0 };
  server.on("connection", (s: MemorySocket) => {
    sockets.opened++;
    s.once("close", () => sockets.closed++);
  });
  return { bridge: new Bridge(server, "127.0.0.1", () => {}), sockets };
}

/** An answer's body: whole already when it was small, else read to its end. */
const bytes = (body: Buffer | Readable) => (Buffer.isBuffer(body) ? body : buffer(body));

const settle = () => new Promise((resolve) => setTimeout(resolve, 20));

function handler(req: http.IncomingMessage, res: http.ServerResponse): void {
  if (req.url === "/closing") {
    res.writeHead(503, { connection: "close" }).end("going");
    return;
  }
  if (req.url === "/stream") {
    res.write("a".repeat(100_000));
    res.end("b");
    return;
  }
  req.resume();
  req.on("end", () => res.end(`${req.method} ${req.url}`));
}

test("reads reuse one socket; a request with a body, or an answer that closes, gets a socket of its own", async () => {
  const { bridge, sockets } = counted(handler);
  const send = async (method: string, path: string, pieces?: Buffer[]) => {
    const body = pieces === undefined ? undefined : Readable.from(pieces);
    const answer = await bridge.request({ method, path, headers: {}, body });
    return { status: answer.status, text: (await bytes(answer.body)).toString() };
  };
  for (let i = 0; i < 50; i++) assert.equal((await send("GET", `/${i}`)).text, `GET /${i}`);
  const small = await bridge.request({ method: "GET", path: "/small", headers: {}, body: undefined });
  assert.ok(Buffer.isBuffer(small.body), "an answer of a small known length comes whole");
  assert.equal((await send("GET", "/stream")).text.length, 100_001);
  assert.equal((await send("HEAD", "/")).text, "");
  await settle();
  assert.deepEqual(sockets, { opened: 1, closed: 0 });

  assert.equal((await send("POST", "/", [Buffer.from("x".repeat(1000))])).text, "POST /");
  await settle();
  assert.deepEqual(sockets, { opened: 2, closed: 1 }, "the request with a body closed its own socket");

  assert.equal((await send("GET", "/closing")).status, 503);
  await settle();
  assert.deepEqual(sockets, { opened: 2, closed: 2 }, "the answer that said close closed the kept socket");
  assert.equal((await send("GET", "/after")).text, "GET /after");

  bridge.close();
  await settle();
  assert.deepEqual(sockets, { opened: 3, closed: 3 });
});

test("reads at once each get a socket; at most 16 are kept, and all close with the bridge", async () => {
  const { bridge, sockets } = counted(handler);
  const read = async (i: number) => {
    const answer = await bridge.request({ method: "GET", path: `/${i}`, headers: {}, body: undefined });
    return (await bytes(answer.body)).toString();
  };
  const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => read(i)));
  assert.deepEqual(
    answers,
    Array.from({ length: 20 }, (_, i) => `GET /${i}`),
  );
  await settle();
  assert.deepEqual(sockets, { opened: 20, closed: 4 });
  bridge.close();
  await settle();
  assert.deepEqual(sockets, { opened: 20, closed: 20 });
});

test("a read aborted half-way closes its socket; the next read gets a new one", async () => {
  const { bridge, sockets } = counted((req, res) => {
    if (req.url === "/slow") res.write("first piece");
    else res.end("ok");
  });
  const abort = new AbortController();
  const answer = await bridge.request(
    { method: "GET", path: "/slow", headers: {}, body: undefined },
    abort.signal,
  );
  assert.equal(answer.status, 200);
  assert.ok(!Buffer.isBuffer(answer.body), "an answer without a length streams");
  const body = answer.body;
  const broken = new Promise((resolve) => body.once("error", resolve));
  abort.abort();
  assert.match(String(await broken), /closed its answer before its end/);
  const next = await bridge.request({ method: "GET", path: "/", headers: {}, body: undefined });
  assert.equal((await bytes(next.body)).toString(), "ok");
  await settle();
  assert.deepEqual(sockets, { opened: 2, closed: 1 });
  bridge.close();
});
