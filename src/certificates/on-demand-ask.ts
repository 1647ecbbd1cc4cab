import { randomBytes, timingSafeEqual } from "node:crypto";
import type { AddressInfo } from "node:net";
import type { Logger } from "pino";
import { http, type IncomingMessage, type Server, type ServerResponse } from "../util/node-builtins.js";
import type { OnDemandGate } from "./on-demand-gate.js";

/**
 * The endpoint Caddy asks before it gets a certificate on demand (its `http` permission module: `GET
 * <endpoint>?domain=<name>`, 2xx allows). A listener of its own on the loopback, on a port the system
 * picks, answering one path holding a secret made at each start (only what can read Caddy's config knows
 * it) and nothing else: no API route, no token taken, 404 for any other path or method. Caddy gives up on
 * it after 10 s; a decision reads the routes the agent already holds and one row of the database.
 */
export class OnDemandAsk {
  private readonly server: Server;
  private readonly path = `/on-demand/${randomBytes(24).toString("hex")}`;
  private listening: Promise<string> | undefined;

  constructor(
    private readonly gate: Pick<OnDemandGate, "decide">,
    private readonly log: Logger,
  ) {
    this.server = http.createServer((req, res) => void this.answer(req, res));
    this.server.headersTimeout = 5_000;
    this.server.requestTimeout = 10_000;
    this.server.keepAliveTimeout = 5_000;
  }

  /** Listens on 127.0.0.1 (a free port), once; resolves with the URL Caddy is given. */
  start(): Promise<string> {
    this.listening ??= this.listen().catch((err: unknown) => {
      this.listening = undefined;
      throw err;
    });
    return this.listening;
  }

  private async listen(): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(0, "127.0.0.1", () => {
        this.server.off("error", reject);
        resolve();
      });
    });
    const { port } = this.server.address() as AddressInfo;
    return `http://127.0.0.1:${port}${this.path}`;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private async answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    const domain = url.searchParams.get("domain");
    if (req.method !== "GET" || !sameSecret(url.pathname, this.path) || domain === null) {
      res.writeHead(404).end();
      return;
    }
    try {
      const { allowed, verdict } = await this.gate.decide(domain);
      res.writeHead(allowed ? 200 : 403, { "content-type": "text/plain" }).end(verdict);
    } catch (err) {
      this.log.error({ err, host: domain }, "on-demand permission failed");
      res.writeHead(500).end();
    }
  }
}

/** Whether a path is the secret one, compared in constant time. */
function sameSecret(path: string, secret: string): boolean {
  const a = Buffer.from(path);
  const b = Buffer.from(secret);
  return a.length === b.length && timingSafeEqual(a, b);
}
