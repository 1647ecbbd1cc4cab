import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import https from "node:https";
import { isIP, type LookupFunction } from "node:net";
import { AddressSet } from "../util/cidrs.js";
import { type Agent, http } from "../util/node-builtins.js";
import { absoluteUrl, carriesCredentials } from "../util/urls.js";

/**
 * The `callback_url` that asks for events over the agent's connection to its control plane
 * (docs/connect.md, "Events"), instead of a POST to a URL.
 */
export const CONNECTION_CALLBACK = "hostkeeper:connection";

/**
 * Where callbacks may go: never to the address ranges a caller-supplied URL must not reach (cloud metadata,
 * link-local, ...); over the connection only when there is one.
 */
export class DenyList {
  private readonly set: AddressSet;
  constructor(
    readonly cidrs: readonly string[],
    readonly connection = false,
  ) {
    this.set = new AddressSet(cidrs);
  }

  denies(address: string): boolean {
    return this.set.has(address);
  }
}

export class EgressDeniedError extends Error {
  constructor(address: string) {
    super(`connection to ${address} is denied by the callback address policy`);
    this.name = "EgressDeniedError";
  }
}

/** A dns lookup that drops denied addresses, so the check applies to the address actually connected to. */
function guardedLookup(deny: DenyList): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err, "", 0);
      const allowed = addresses.filter((a) => !deny.denies(a.address));
      if (allowed.length === 0) {
        const denied = new EgressDeniedError(`${hostname} (${addresses.map((a) => a.address).join(", ")})`);
        return callback(Object.assign(denied, { code: "EDENIED" }) as NodeJS.ErrnoException, "", 0);
      }
      if (options.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, allowed);
      const first = allowed[0] as LookupAddress;
      callback(null, first.address, first.family);
    });
  };
}

export interface EgressResponse {
  status: number;
  retryAfterSeconds: number | undefined;
  /** The first bytes of the response body, for the attempt record. */
  bodySnippet: string;
}

function parseRetryAfter(value: string | string[] | undefined): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (!v) return undefined;
  if (/^\d+$/.test(v.trim())) return Number(v.trim());
  const date = Date.parse(v);
  return Number.isNaN(date) ? undefined : Math.max(0, Math.round((date - Date.now()) / 1000));
}

/** How long a kept-alive callback connection may stay idle: less than servers commonly keep one open. */
const IDLE_MS = 1000;

/**
 * Kept-alive connections for one outbox's callbacks. Under concurrent changes nearly every change sends two
 * callbacks, most to the same receivers, and opening a connection for each was much of what a callback
 * cost the agent. An idle connection is closed after `IDLE_MS` (sooner when the server's `Keep-Alive`
 * header says so); a request on a reused connection is checked against the deny list as on a new one, and
 * one that the server closed as it was reused is sent again on a new connection (see `guardedPost`).
 */
export class CallbackConnections {
  private readonly plain = new http.Agent({ keepAlive: true, timeout: IDLE_MS });
  private readonly tls = new https.Agent({ keepAlive: true, timeout: IDLE_MS });

  for(url: URL): Agent {
    return url.protocol === "https:" ? this.tls : this.plain;
  }

  /** Closes the idle connections; those in use close once idle (they keep no process alive meanwhile). */
  closeIdle(): void {
    for (const agent of [this.plain, this.tls])
      for (const sockets of Object.values(agent.freeSockets)) for (const s of sockets ?? []) s.destroy();
  }
}

export interface PostOptions {
  deny: DenyList;
  timeoutMs: number;
  /** Where the request may reuse a connection; a new connection of its own without. */
  connections?: CallbackConnections;
}

/**
 * POSTs a body to a caller-supplied URL under the deny list: IP literals are checked before connecting,
 * names through the lookup, and the socket's peer once connected (or as the request gets a reused
 * connection). Redirects are not followed. A reused connection that fails before any answer (the server
 * closed it meanwhile) is replaced by a new one, once, within the same time-out.
 */
export function guardedPost(
  url: URL,
  body: string,
  headers: Record<string, string>,
  opts: PostOptions,
): Promise<EgressResponse> {
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (isIP(host) && opts.deny.denies(host)) return Promise.reject(new EgressDeniedError(host));
  const signal = AbortSignal.timeout(opts.timeoutMs);
  const send = (agent: Agent | false) => post(url, body, headers, opts, signal, agent);
  return send(opts.connections?.for(url) ?? false).catch((err: unknown) => {
    if (err instanceof StaleConnection) return send(false);
    throw err;
  });
}

/** A reused connection failed before the request got any answer. */
class StaleConnection extends Error {}

function post(
  url: URL,
  body: string,
  headers: Record<string, string>,
  opts: PostOptions,
  signal: AbortSignal,
  agent: Agent | false,
): Promise<EgressResponse> {
  return new Promise((resolve, reject) => {
    const client = url.protocol === "https:" ? https : http;
    const req = client.request(url, {
      method: "POST",
      headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
      lookup: guardedLookup(opts.deny),
      agent,
      signal,
    });
    req.on("socket", (socket) => {
      const check = () => {
        const peer = socket.remoteAddress;
        if (peer && opts.deny.denies(peer)) req.destroy(new EgressDeniedError(peer));
      };
      if (socket.connecting) socket.once("connect", check);
      else check();
    });
    let answered = false;
    req.on("response", (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (c: Buffer) => {
        if (size < 1024) chunks.push(c);
        size += c.length;
      });
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          retryAfterSeconds: parseRetryAfter(res.headers["retry-after"]),
          bodySnippet: Buffer.concat(chunks).toString("utf8").slice(0, 1024),
        }),
      );
      res.on("error", reject);
    });
    req.on("error", (err: NodeJS.ErrnoException) => {
      if (err.name === "AbortError" || err.name === "TimeoutError")
        reject(new Error(`no response within ${opts.timeoutMs} ms`));
      else if (req.reusedSocket && !answered && (err.code === "ECONNRESET" || err.code === "EPIPE"))
        reject(new StaleConnection(err.message));
      else reject(err);
    });
    req.end(body);
  });
}

/** Parse-time rules for a callback URL: absolute http(s), no credentials, not a denied IP literal. */
export function callbackUrlProblem(raw: string, deny: DenyList): string | undefined {
  if (raw === CONNECTION_CALLBACK)
    return deny.connection
      ? undefined
      : `${CONNECTION_CALLBACK} needs the agent's connection to a control plane (HOSTKEEPER_CONNECT_URL), which is not set`;
  const url = absoluteUrl(raw);
  if (!url || (url.protocol !== "http:" && url.protocol !== "https:"))
    return "must be an absolute http or https URL";
  if (carriesCredentials(url)) return "must not carry credentials";
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (isIP(host) && deny.denies(host)) return `points at ${host}, an address callbacks may not reach`;
  return undefined;
}
