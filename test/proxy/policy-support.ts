import { execFileSync } from "node:child_process";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { fetchedCaddyBinary } from "../../src/caddy/settings.js";
import {
  type After,
  closeAfter,
  type ProxyRequestOptions,
  proxyExchange,
  sentAgainOnReset,
} from "../helpers/http.js";

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

/**
 * One request through Caddy's listener for `host`, on a fresh connection, sent again when Caddy resets it
 * before answering (see `sentAgainOnReset`).
 */
export const send = (port: number, host: string, o: Omit<ProxyRequestOptions, "agent"> = {}) =>
  sentAgainOnReset(() => proxyExchange(port, host, o));

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
