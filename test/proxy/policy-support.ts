import { execFileSync } from "node:child_process";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { fetchedCaddyBinary } from "../../src/proxy/settings.js";
import { type After, closeAfter } from "../helpers/http.js";

/** What an upstream received: the path as it arrived and the request's headers. */
export interface Seen {
  path: string;
  headers: http.IncomingHttpHeaders;
}

/**
 * A loopback upstream that records every request and answers with its name, a `Server` and an
 * `X-Powered-By` header of its own (for response header changes to remove) and, for `/big`, 4 KiB of text.
 */
export async function recordingUpstream(t: After, name: string) {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    seen.push({ path: req.url ?? "", headers: req.headers });
    req.resume();
    const body = req.url === "/big" ? `${name} `.repeat(1024) : name;
    res
      .writeHead(200, { "content-type": "text/plain", server: "upstream/1", "x-powered-by": "php/8" })
      .end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closeAfter(t, server);
  return { port: (server.address() as AddressInfo).port, seen };
}

export interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export interface SendOptions {
  path?: string;
  headers?: Record<string, string>;
  /** The client's source address (all of 127.0.0.0/8 is local). */
  from?: string;
}

/**
 * One request through Caddy's listener for `host`, on a fresh connection; sent again (up to twice) when
 * Caddy resets it before answering, as right after a reload (see viaProxy in test/helpers/http.ts).
 */
export async function send(port: number, host: string, o: SendOptions = {}): Promise<Answer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await sendOnce(port, host, o);
    } catch (err) {
      if (attempt === 3 || (err as NodeJS.ErrnoException).code !== "ECONNRESET") throw err;
    }
  }
}

function sendOnce(port: number, host: string, o: SendOptions): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        path: o.path ?? "/",
        headers: { host, ...o.headers },
        agent: false,
        ...(o.from ? { localAddress: o.from } : {}),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
      },
    );
    req.on("error", reject);
    req.setTimeout(10_000, () => req.destroy(new Error("timeout")));
    req.end();
  });
}

/** `Authorization` header of HTTP basic authentication. */
export const basic = (user: string, password: string) => ({
  authorization: `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`,
});

/**
 * A bcrypt hash of `password` made by a real bcrypt implementation (Caddy's own `hash-password`, Go's
 * x/crypto/bcrypt), at the lowest cost so that each check is cheap.
 */
export function bcryptHash(password: string, cost = 4): string {
  return execFileSync(
    fetchedCaddyBinary,
    ["hash-password", "--algorithm", "bcrypt", "--bcrypt-cost", String(cost), "--plaintext", password],
    { encoding: "utf8" },
  ).trim();
}
