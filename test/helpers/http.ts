import { createHmac, timingSafeEqual } from "node:crypto";
import { createReadStream, statSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { join, normalize } from "node:path";

export type After = { after: (fn: () => unknown) => void };

/** Closes `server` (and its open connections) when the test ends. */
export function closeAfter(t: After, server: http.Server): void {
  t.after(
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );
}

/** A loopback HTTP server answering every request with `name`; closed when the test ends. */
export async function startUpstream(
  t: After,
  name: string,
  port = 0,
): Promise<{ port: number; hits: () => number; server: http.Server }> {
  let hits = 0;
  const server = http.createServer((req, res) => {
    hits++;
    req.resume();
    res.writeHead(200, { "content-type": "text/plain" }).end(name);
  });
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
  closeAfter(t, server);
  return { port: (server.address() as AddressInfo).port, hits: () => hits, server };
}

export interface ReceivedWebhook {
  headers: http.IncomingHttpHeaders;
  body: string;
  json: { type: string; timestamp: string; data: Record<string, unknown> };
  at: number;
}

/** A request the receiver got, whatever it answered, with the status it answered. */
export interface ReceiverRequest extends ReceivedWebhook {
  status: number;
}

/**
 * A loopback callback receiver; `status` decides the answer for each request (by its number, or by what it
 * carries) and `headers` the answer's headers. A callback is recorded as soon as its body is in: in
 * `requests` whatever the answer, in `received` when the answer is a 2xx. When `hold` returns a promise for
 * a 2xx callback, the answer waits for that promise (so a test can stop the sender between the receiver
 * having a callback and the sender learning it arrived).
 */
export async function startReceiver(
  t: After,
  opts: {
    status?: (n: number, w: ReceivedWebhook) => number;
    headers?: (n: number) => Record<string, string>;
    port?: number;
    hold?: (w: ReceivedWebhook) => Promise<unknown> | undefined;
  } = {},
): Promise<{
  url: string;
  port: number;
  received: ReceivedWebhook[];
  requests: ReceiverRequest[];
  close: () => Promise<void>;
  waitFor: (n: number, ms: number) => Promise<void>;
  waitForRequests: (n: number, ms: number) => Promise<void>;
}> {
  const received: ReceivedWebhook[] = [];
  const requests: ReceiverRequest[] = [];
  let n = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      const i = n++;
      const body = Buffer.concat(chunks).toString("utf8");
      const w = { headers: req.headers, body, json: JSON.parse(body), at: Date.now() };
      const status = opts.status ? opts.status(i, w) : 200;
      requests.push({ ...w, status });
      let held: Promise<unknown> | undefined;
      if (status >= 200 && status < 300) {
        received.push(w);
        held = opts.hold?.(w);
      }
      if (held) await held;
      res.writeHead(status, opts.headers?.(i) ?? {}).end();
    });
  });
  await new Promise<void>((r) => server.listen(opts.port ?? 0, "127.0.0.1", r));
  const close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
  t.after(() => (server.listening ? close() : undefined));
  const port = (server.address() as AddressInfo).port;
  const waitUntil = async (list: unknown[], what: string, count: number, ms: number) => {
    const end = Date.now() + ms;
    while (list.length < count) {
      if (Date.now() > end) throw new Error(`expected ${count} ${what} within ${ms} ms, got ${list.length}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  return {
    url: `http://127.0.0.1:${port}/hook`,
    port,
    received,
    requests,
    close,
    waitFor: (count, ms) => waitUntil(received, "callbacks", count, ms),
    waitForRequests: (count, ms) => waitUntil(requests, "requests", count, ms),
  };
}

/** Verifies a Standard Webhooks signature the way a receiver would (independent of the agent's signer). */
export function verifyStandardWebhook(secret: string, w: ReceivedWebhook): boolean {
  const id = String(w.headers["webhook-id"]);
  const ts = String(w.headers["webhook-timestamp"]);
  const key = Buffer.from(secret.slice("whsec_".length), "base64");
  const expected = Buffer.from(createHmac("sha256", key).update(`${id}.${ts}.${w.body}`).digest("base64"));
  return String(w.headers["webhook-signature"])
    .split(" ")
    .some((sig) => {
      const [version, value = ""] = sig.split(",");
      const got = Buffer.from(value);
      return version === "v1" && got.length === expected.length && timingSafeEqual(got, expected);
    });
}

/** What one request through Caddy's listener is sent with, besides its Host header. */
export interface ProxyRequestOptions {
  path?: string;
  headers?: Record<string, string | string[]>;
  /** The client's source address (all of 127.0.0.0/8 is local). */
  from?: string;
  agent?: http.Agent | false;
}

/** An answer as it came, its body's bytes untouched. */
export interface ProxyAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/**
 * One request through Caddy's listener with a given Host header; a fresh connection unless an agent is given.
 * Every failure is the caller's.
 */
export function proxyExchange(port: number, host: string, o: ProxyRequestOptions = {}): Promise<ProxyAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        path: o.path ?? "/",
        headers: { host, ...o.headers },
        agent: o.agent ?? false,
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

/**
 * One request through Caddy's listener with a given Host header, its body as text. Every failure is the
 * caller's: load loops that count failed requests use this.
 */
export async function proxyRequest(
  port: number,
  host: string,
  path = "/",
  agent: http.Agent | false = false,
): Promise<{ status: number; body: string }> {
  const r = await proxyExchange(port, host, { path, agent });
  return { status: r.status, body: r.body.toString() };
}

/**
 * A request on a fresh connection that Caddy resets before any answer is sent again (up to twice): Caddy
 * answers a config change before its old server has closed its listening socket (its reload binds a new
 * socket beside the old one), and a connection the kernel queued on the old socket is then reset. Measured
 * right after each of 1,000 route creates with the machine's cores busy: 7 resets. What a route answers is
 * what these tests check; the loops that count failed requests send once.
 */
export async function sentAgainOnReset<T>(send: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await send();
    } catch (err) {
      if (attempt === 3 || (err as NodeJS.ErrnoException).code !== "ECONNRESET") throw err;
    }
  }
}

/** A request through Caddy's listener to see what a route answers (see `sentAgainOnReset`). */
export async function viaProxy(
  port: number,
  host: string,
  path = "/",
  agent: http.Agent | false = false,
): Promise<{ status: number; body: string }> {
  // A reused connection's reset is the test's to see.
  if (agent !== false) return proxyRequest(port, host, path, agent);
  return sentAgainOnReset(() => proxyRequest(port, host, path));
}

/**
 * Serves the files under `dir` over loopback HTTP (a package repository as a mirror serves it); package
 * files (`.deb`, `.rpm`) are answered 404 while `refusePackages` is set, or held back by `holdPackages`; every
 * path asked is recorded.
 */
export async function serveDirectory(t: After, dir: string) {
  const asked: string[] = [];
  const state: { refusePackages: boolean; hold: Promise<unknown> | undefined } = {
    refusePackages: false,
    hold: undefined,
  };
  const server = http.createServer(async (req, res) => {
    const path = decodeURIComponent((req.url ?? "/").split("?")[0] ?? "/");
    asked.push(path);
    if (state.hold && /\.(deb|rpm)$/.test(path)) await state.hold;
    const file = join(dir, normalize(path));
    if (!file.startsWith(dir) || (state.refusePackages && /\.(deb|rpm)$/.test(path)))
      return void res.writeHead(404).end();
    try {
      const size = statSync(file).size;
      res.writeHead(200, { "content-length": size });
      createReadStream(file).pipe(res);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closeAfter(t, server);
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    asked,
    refusePackages: (on: boolean) => {
      state.refusePackages = on;
    },
    /** Package files are answered only once `until` settles. */
    holdPackages: (until: Promise<unknown> | undefined) => {
      state.hold = until;
    },
  };
}
