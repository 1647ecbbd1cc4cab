import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import https from "node:https";
import { isIP, type LookupFunction } from "node:net";
import { AddressSet } from "../util/cidrs.js";
import { http } from "../util/node-builtins.js";
import { absoluteUrl, carriesCredentials } from "../util/urls.js";

/** Address ranges a caller-supplied URL must never reach (cloud metadata, link-local, ...). */
export class DenyList {
  private readonly set: AddressSet;
  constructor(readonly cidrs: readonly string[]) {
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

/**
 * POSTs a body to a caller-supplied URL under the deny list: IP literals are checked before connecting,
 * names through the lookup, and the socket's peer once connected. Redirects are not followed.
 */
export function guardedPost(
  url: URL,
  body: string,
  headers: Record<string, string>,
  opts: { deny: DenyList; timeoutMs: number },
): Promise<EgressResponse> {
  return new Promise((resolve, reject) => {
    const host = url.hostname.replace(/^\[|\]$/g, "");
    if (isIP(host) && opts.deny.denies(host)) return reject(new EgressDeniedError(host));
    const client = url.protocol === "https:" ? https : http;
    const req = client.request(url, {
      method: "POST",
      headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
      lookup: guardedLookup(opts.deny),
      agent: false,
      signal: AbortSignal.timeout(opts.timeoutMs),
    });
    req.on("socket", (socket) => {
      socket.once("connect", () => {
        const peer = socket.remoteAddress;
        if (peer && opts.deny.denies(peer)) req.destroy(new EgressDeniedError(peer));
      });
    });
    req.on("response", (res) => {
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
    req.on("error", (err) => {
      if (err.name === "AbortError" || err.name === "TimeoutError")
        reject(new Error(`no response within ${opts.timeoutMs} ms`));
      else reject(err);
    });
    req.end(body);
  });
}

/** Parse-time rules for a callback URL: absolute http(s), no credentials, not a denied IP literal. */
export function callbackUrlProblem(raw: string, deny: DenyList): string | undefined {
  const url = absoluteUrl(raw);
  if (!url || (url.protocol !== "http:" && url.protocol !== "https:"))
    return "must be an absolute http or https URL";
  if (carriesCredentials(url)) return "must not carry credentials";
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (isIP(host) && deny.denies(host)) return `points at ${host}, an address callbacks may not reach`;
  return undefined;
}
