import { isIP } from "node:net";
import type { InputIssue } from "../../util/invalid-input.js";
import type {
  BasicAuth,
  HeaderOps,
  Headers,
  Maintenance,
  PathRoute,
  RouteWriteRequest,
} from "../write-schemas.js";
import { bcryptCost } from "./basic-auth.js";
import { normalizeDomain } from "./domain.js";

/*
 * The rules of the site policies that a schema cannot say, each broken rule an issue naming its field from
 * the body's top. Nothing here reaches Caddy: `compilePolicies` takes what passed.
 */

type Issues = InputIssue[];

/** The `redirect_from` hosts normalised like the domain (in the request's order), and what is wrong with them. */
export function redirectHosts(
  request: RouteWriteRequest,
  domain: string | undefined,
  issues: Issues,
): string[] {
  const from = request.redirect_from;
  if (from === undefined) {
    if (request.redirect_status !== undefined)
      issues.push({ field: "redirect_status", message: "is only allowed with redirect_from" });
    return [];
  }
  if (domain?.startsWith("*."))
    issues.push({ field: "redirect_from", message: "is not allowed on a wildcard domain" });
  const seen = new Set<string>();
  return from.map((raw, i) => {
    const field = `redirect_from[${i}]`;
    const host = normalizeDomain(raw);
    if (!host.ok) {
      issues.push({ field, message: host.message });
      return raw;
    }
    if (host.domain.startsWith("*.")) issues.push({ field, message: "must not be a wildcard" });
    else if (host.domain === domain) issues.push({ field, message: "is the route's own domain" });
    else if (seen.has(host.domain)) issues.push({ field, message: `names ${host.domain} twice` });
    seen.add(host.domain);
    return host.domain;
  });
}

/** Characters a prefix may hold: RFC 3986 path characters, without `%` (write the decoded form) and `*`. */
const PREFIX_CHARS = /^[A-Za-z0-9\-._~!$&'()+,;=:@/]+$/;

export function pathIssues(paths: readonly PathRoute[] | undefined, issues: Issues): void {
  const seen = new Map<string, number>();
  paths?.forEach((p, i) => {
    const field = `paths[${i}].prefix`;
    const message = prefixProblem(p.prefix);
    if (message !== undefined) issues.push({ field, message });
    const key = p.prefix.toLowerCase();
    const twin = seen.get(key);
    if (twin !== undefined)
      issues.push({
        field,
        message: `is the prefix of paths[${twin}] too (prefixes match case-insensitively)`,
      });
    else seen.set(key, i);
  });
}

function prefixProblem(prefix: string): string | undefined {
  if (!prefix.startsWith("/")) return "must start with /";
  if (prefix === "/") return "must not be / alone (that is the route's own upstreams)";
  if (prefix.endsWith("/")) return "must not end with /";
  if (prefix.includes("//")) return "must not contain //";
  if (/[*?#]/.test(prefix)) return "must not contain *, ? or #";
  if (!PREFIX_CHARS.test(prefix))
    return "may hold letters, digits and -._~!$&'()+,;=:@/ only (no percent-encoding, spaces or non-ASCII)";
  if (prefix.split("/").some((s) => s === "." || s === "..")) return "must not have a . or .. segment";
  return undefined;
}

/** Every wrong password costs Caddy one full hash: 2^14 rounds is about a second on one core. */
const MAX_BCRYPT_COST = 14;

export function basicAuthIssues(auth: BasicAuth | undefined, issues: Issues): void {
  const seen = new Map<string, number>();
  let first: { cost: number; at: number } | undefined;
  auth?.users.forEach((u, i) => {
    const at = `basic_auth.users[${i}]`;
    if (u.username.includes(":")) issues.push({ field: `${at}.username`, message: "must not contain :" });
    if (/\p{Cc}/u.test(u.username))
      issues.push({ field: `${at}.username`, message: "must not contain control characters" });
    const twin = seen.get(u.username);
    if (twin !== undefined)
      issues.push({ field: `${at}.username`, message: `is the username of basic_auth.users[${twin}] too` });
    else seen.set(u.username, i);
    // The value is never repeated: it may be a plain password sent by mistake.
    const cost = bcryptCost(u.password_hash);
    if (cost === undefined)
      issues.push({
        field: `${at}.password_hash`,
        message: "must be a bcrypt hash ($2a$, $2b$ or $2y$); plain passwords are refused",
      });
    else if (cost < 4 || cost > MAX_BCRYPT_COST)
      issues.push({
        field: `${at}.password_hash`,
        message: `must have a bcrypt cost of 4 to ${MAX_BCRYPT_COST}`,
      });
    else if (first === undefined) first = { cost, at: i };
    // A user whose check costs more or less than the others' would be told from them, and from no user.
    else if (cost !== first.cost)
      issues.push({
        field: `${at}.password_hash`,
        message: `has bcrypt cost ${cost}; every user of a route must have the same cost (basic_auth.users[${first.at}] has ${first.cost})`,
      });
  });
}

/** Each entry an IPv4 or IPv6 address, or one with a prefix length that fits it. */
export function allowIpIssues(ips: readonly string[] | undefined, issues: Issues): void {
  ips?.forEach((entry, i) => {
    const [address = "", bits, extra] = entry.split("/");
    const family = isIP(address);
    const max = family === 4 ? 32 : 128;
    const ok =
      family !== 0 &&
      extra === undefined &&
      (bits === undefined || (/^(0|[1-9]\d{0,2})$/.test(bits) && Number(bits) <= max));
    // Caddy compares an IPv4 client with IPv4 ranges only: an IPv4-mapped IPv6 entry would never match.
    if (ok && family === 6 && isIpv4Mapped(address))
      issues.push({
        field: `allow_ips[${i}]`,
        message: "is an IPv4-mapped IPv6 address; write the IPv4 address",
      });
    else if (!ok)
      issues.push({
        field: `allow_ips[${i}]`,
        message: "must be an IPv4 or IPv6 address, or a CIDR range such as 10.0.0.0/8 or 2001:db8::/32",
      });
  });
}

/** `::ffff:a.b.c.d` in any spelling (`::ffff:7f00:1`, `0:0:0:0:0:ffff:...`): URL parsing gives the canonical form. */
function isIpv4Mapped(address: string): boolean {
  try {
    return /^\[::ffff:[0-9a-f]{1,4}:[0-9a-f]{1,4}\]$/.test(new URL(`http://[${address}]`).hostname);
  } catch {
    return false;
  }
}

/** RFC 9110 token characters, without `*`, which Caddy reads as a wildcard in a name to delete. */
const TOKEN = /^[!#$%&'+\-.^_`|~0-9A-Za-z]+$/;
/** Headers of the connection or of the message's framing: changing them would break the exchange itself. */
const REFUSED_HEADERS = new Set([
  "connection",
  "content-length",
  "transfer-encoding",
  "upgrade",
  "keep-alive",
  "te",
  "trailer",
]);
const MAX_HEADER_ENTRIES = 64;
const MAX_HEADER_VALUE_BYTES = 4096;

export function headerIssues(headers: Headers | undefined, issues: Issues): void {
  if (headers === undefined) return;
  let entries = 0;
  for (const side of ["request", "response"] as const) {
    const ops = headers[side];
    if (ops === undefined) continue;
    entries += Object.keys(ops.set ?? {}).length + (ops.delete?.length ?? 0);
    headerOpsIssues(ops, `headers.${side}`, issues);
  }
  if (entries > MAX_HEADER_ENTRIES)
    issues.push({
      field: "headers",
      message: `has ${entries} entries; at most ${MAX_HEADER_ENTRIES} in all`,
    });
}

function headerOpsIssues(ops: HeaderOps, at: string, issues: Issues): void {
  const setNames = new Map<string, string>();
  for (const [name, value] of Object.entries(ops.set ?? {})) {
    const field = `${at}.set.${name}`;
    const problem = headerNameProblem(name);
    if (problem !== undefined) issues.push({ field, message: problem });
    const twin = setNames.get(name.toLowerCase());
    if (twin !== undefined) issues.push({ field, message: `names the same header as ${twin}` });
    setNames.set(name.toLowerCase(), name);
    if (/[\r\n\0]/.test(value)) issues.push({ field, message: "must not contain CR, LF or NUL" });
    else if (hasControl(value))
      issues.push({ field, message: "must not contain control characters other than tab" });
    if (Buffer.byteLength(value) > MAX_HEADER_VALUE_BYTES)
      issues.push({ field, message: `must be at most ${MAX_HEADER_VALUE_BYTES} bytes` });
  }
  ops.delete?.forEach((name, i) => {
    const field = `${at}.delete[${i}]`;
    const problem = headerNameProblem(name);
    if (problem !== undefined) issues.push({ field, message: problem });
    if (setNames.has(name.toLowerCase()))
      issues.push({
        field,
        message: `is set and deleted at once (${at}.set.${setNames.get(name.toLowerCase())})`,
      });
  });
  const deleted = new Set<string>();
  ops.delete?.forEach((name, i) => {
    if (deleted.has(name.toLowerCase()))
      issues.push({ field: `${at}.delete[${i}]`, message: "is listed twice" });
    deleted.add(name.toLowerCase());
  });
}

/**
 * RFC 9110 field values hold no control character but tab. Caddy writes them anyway: in a request header
 * Go's client then refuses every request (502), in a response header strict clients refuse the answer.
 */
const hasControl = (value: string): boolean =>
  [...value].some((c) => c !== "\t" && (c < " " || c === "\u007f"));

function headerNameProblem(name: string): string | undefined {
  if (!TOKEN.test(name)) return "must be a header name (an RFC 9110 token, without *)";
  if (REFUSED_HEADERS.has(name.toLowerCase()))
    return "is a connection or framing header, which cannot be changed";
  return undefined;
}

/** type/subtype and parameters; around `;` only RFC 9110's OWS (space, tab): `\s` would let CR and LF in. */
const MEDIA_TYPE =
  /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+\/[!#$%&'*+\-.^_`|~0-9A-Za-z]+([ \t]*;[ \t]*[!#$%&'*+\-.^_`|~0-9A-Za-z]+=("[^"\\\p{Cc}]*"|[!#$%&'*+\-.^_`|~0-9A-Za-z]+))*$/u;
const MAX_BODY_BYTES = 64 * 1024;

export function maintenanceIssues(m: Maintenance | undefined, issues: Issues): void {
  if (m === undefined) return;
  if (m.body !== undefined && Buffer.byteLength(m.body) > MAX_BODY_BYTES)
    issues.push({ field: "maintenance.body", message: "must be at most 64 KiB in UTF-8" });
  if (m.content_type !== undefined && !MEDIA_TYPE.test(m.content_type))
    issues.push({
      field: "maintenance.content_type",
      message: "must be a media type such as text/html; charset=utf-8",
    });
}
