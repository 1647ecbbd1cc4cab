/**
 * A minimal WebSocket (RFC 6455) echo server and client on node:http's upgrade, for the tests and the
 * benchmark: text frames up to 64 KiB, no extensions, no fragmentation. Enough to hold a real upgraded
 * stream open through Caddy and see whether it still echoes. Never shipped.
 */
import { createHash, randomBytes } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const accept = (key: string) => createHash("sha1").update(key + GUID).digest("base64");

function frame(opcode: number, payload: Buffer, masked: boolean): Buffer {
  const len = payload.length;
  if (len > 0xffff) throw new Error("frame too large for this helper");
  const head = Buffer.alloc(len < 126 ? 2 : 4);
  head[0] = 0x80 | opcode;
  head[1] = (masked ? 0x80 : 0) | (len < 126 ? len : 126);
  if (len >= 126) head.writeUInt16BE(len, 2);
  if (!masked) return Buffer.concat([head, payload]);
  const mask = randomBytes(4);
  const body = Buffer.from(payload.map((b, i) => b ^ (mask[i % 4] as number)));
  return Buffer.concat([head, mask, body]);
}

/** Reads whole frames off a stream; calls `onFrame` with each one's opcode and unmasked payload. */
function frameReader(onFrame: (opcode: number, payload: Buffer) => void): (chunk: Buffer) => void {
  let buf = Buffer.alloc(0);
  return (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    for (;;) {
      if (buf.length < 2) return;
      const b1 = buf[1] as number;
      let len = b1 & 0x7f;
      let off = 2;
      if (len === 126) {
        if (buf.length < 4) return;
        len = buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) throw new Error("64-bit frame lengths are not supported by this helper");
      const masked = (b1 & 0x80) !== 0;
      const need = off + (masked ? 4 : 0) + len;
      if (buf.length < need) return;
      const mask = masked ? buf.subarray(off, off + 4) : undefined;
      const start = off + (masked ? 4 : 0);
      const payload = Buffer.from(buf.subarray(start, need));
      if (mask) for (let i = 0; i < payload.length; i++) payload[i] = (payload[i] as number) ^ (mask[i % 4] as number);
      const opcode = (buf[0] as number) & 0x0f;
      buf = buf.subarray(need);
      onFrame(opcode, payload);
    }
  };
}

export interface EchoServer {
  port: number;
  /** Upgraded connections the server holds open now. */
  open(): number;
  close(): Promise<void>;
}

/** A WebSocket server on loopback that echoes every text frame; plain GETs answer `body`. */
export async function startEchoServer(body = "ws-echo"): Promise<EchoServer> {
  const sockets = new Set<Duplex>();
  const server = http.createServer((_req, res) => res.end(body));
  server.on("upgrade", (req, socket: Duplex) => {
    const key = req.headers["sec-websocket-key"];
    if (typeof key !== "string" || req.headers.upgrade?.toLowerCase() !== "websocket") {
      socket.end("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept(key)}\r\n\r\n`,
    );
    socket.on(
      "data",
      frameReader((opcode, payload) => {
        if (opcode === 0x1) socket.write(frame(0x1, payload, false));
        else if (opcode === 0x8) socket.end(frame(0x8, payload.subarray(0, 2), false));
        else if (opcode === 0x9) socket.write(frame(0xa, payload, false));
      }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    open: () => sockets.size,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export interface WsClient {
  /** Sends `text` and resolves with the echo, or rejects when the stream is closed or gives none in `timeoutMs`. */
  echo(text: string, timeoutMs?: number): Promise<string>;
  /** Resolves once the stream is closed (by either side), with how. */
  readonly closed: Promise<string>;
  isOpen(): boolean;
  close(): void;
}

/** Opens a WebSocket to `127.0.0.1:port` with `Host: host`; resolves once the upgrade is answered. */
export function connectWs(port: number, host: string, path = "/"): Promise<WsClient> {
  return new Promise((resolve, reject) => {
    const key = randomBytes(16).toString("base64");
    const req = http.request({
      host: "127.0.0.1",
      port,
      path,
      agent: false,
      headers: {
        host,
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": key,
      },
    });
    req.on("response", (res) => {
      res.resume();
      reject(new Error(`no upgrade: HTTP ${res.statusCode}`));
    });
    req.on("error", reject);
    req.on("upgrade", (res, socket, head) => {
      if (res.headers["sec-websocket-accept"] !== accept(key)) {
        socket.destroy();
        reject(new Error("wrong Sec-WebSocket-Accept"));
        return;
      }
      let open = true;
      const waiting: { resolve: (s: string) => void; reject: (e: Error) => void }[] = [];
      let markClosed: (how: string) => void = () => undefined;
      const closed = new Promise<string>((r) => {
        markClosed = r;
      });
      const end = (how: string) => {
        if (!open) return;
        open = false;
        for (const w of waiting.splice(0)) w.reject(new Error(`stream closed: ${how}`));
        markClosed(how);
        socket.destroy();
      };
      const read = frameReader((opcode, payload) => {
        if (opcode === 0x1) waiting.shift()?.resolve(payload.toString());
        else if (opcode === 0x8) end("close frame");
      });
      socket.on("data", read);
      socket.on("close", () => end("connection closed"));
      socket.on("error", (err) => end(err.message));
      if (head.length > 0) read(head);
      resolve({
        echo: (text, timeoutMs = 5_000) =>
          new Promise((res2, rej2) => {
            if (!open) {
              rej2(new Error("stream closed"));
              return;
            }
            const timer = setTimeout(() => {
              const i = waiting.indexOf(w);
              if (i !== -1) waiting.splice(i, 1);
              rej2(new Error(`no echo within ${timeoutMs} ms`));
            }, timeoutMs);
            const w = {
              resolve: (s: string) => {
                clearTimeout(timer);
                res2(s);
              },
              reject: (e: Error) => {
                clearTimeout(timer);
                rej2(e);
              },
            };
            waiting.push(w);
            socket.write(frame(0x1, Buffer.from(text), true));
          }),
        closed,
        isOpen: () => open,
        close: () => end("closed by the client"),
      });
    });
    req.end();
  });
}
