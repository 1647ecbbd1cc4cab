/**
 * The bridge from the connection's requests to the agent's own HTTP handling (src/connect/http-bridge.ts),
 * against Node's HTTP server: every request's socket in memory closes once its answer is done, so that the
 * server lets go of it (its list of connections, its parser). Before, none did, and each request over the
 * connection left about 4.5 KB behind in the agent.
 */
import assert from "node:assert/strict";
import http from "node:http";
import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { test } from "node:test";
import { bridgeRequest, type MemorySocket } from "../../src/connect/http-bridge.js";

function countingServer(handler: http.RequestListener) {
  const server = http.createServer(handler);
  const sockets = { opened: 0, closed: 0 };
  server.on("connection", (s: MemorySocket) => {
    sockets.opened++;
    s.once("close", () => sockets.closed++);
  });
  return { server, sockets };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 20));

test("every request's socket closes once its answer is done, whole, streamed, with a body or refused", async () => {
  const { server, sockets } = countingServer((req, res) => {
    if (req.url === "/refused") {
      res.writeHead(413, { connection: "close" }).end("too large");
      return;
    }
    if (req.url === "/stream") {
      res.write("a".repeat(100_000));
      res.end("b");
      return;
    }
    req.resume();
    req.on("end", () => res.end("ok"));
  });
  const send = async (method: string, path: string, pieces?: Buffer[]) => {
    const body = pieces === undefined ? undefined : Readable.from(pieces);
    const answer = await bridgeRequest(server, { method, path, headers: {}, body }, "127.0.0.1", () => {});
    return { status: answer.status, body: await buffer(answer.body) };
  };
  for (let i = 0; i < 50; i++) assert.equal((await send("GET", "/")).body.toString(), "ok");
  assert.equal((await send("GET", "/stream")).body.length, 100_001);
  assert.equal((await send("POST", "/", [Buffer.from("x".repeat(1000))])).body.toString(), "ok");
  assert.equal((await send("HEAD", "/")).body.length, 0);
  assert.equal((await send("POST", "/refused", [Buffer.alloc(10)])).status, 413);
  await settle();
  assert.deepEqual(sockets, { opened: 54, closed: 54 });
});

test("a request aborted half-way closes its socket too", async () => {
  const { server, sockets } = countingServer((_req, res) => {
    res.write("first piece");
  });
  const abort = new AbortController();
  const answer = await bridgeRequest(
    server,
    { method: "GET", path: "/", headers: {}, body: undefined },
    "127.0.0.1",
    () => {},
    abort.signal,
  );
  assert.equal(answer.status, 200);
  const broken = new Promise((resolve) => answer.body.once("error", resolve));
  abort.abort();
  assert.match(String(await broken), /closed its answer before its end/);
  await settle();
  assert.deepEqual(sockets, { opened: 1, closed: 1 });
});
