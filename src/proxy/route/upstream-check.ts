import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { networkInterfaces } from "node:os";
import type { RouteJson } from "../../caddy/routes/plan.js";
import type { CaddyAdminAddress } from "../../caddy/settings.js";
import { AddressSet } from "../../util/cidrs.js";
import type { InputIssue } from "../../util/invalid-input.js";
import { hostPort } from "../../util/urls.js";
import type { RouteWriteRequest } from "../write-schemas.js";
import { parseDial } from "./domain.js";

/*
 * Where a route's upstreams may not point: a route publishes what its upstream answers, so an upstream on
 * the cloud's metadata service, or on the agent's own API, Caddy's admin endpoint or an operator instance,
 * would publish what must stay on the host. A dial is judged by the addresses it reaches: an address as
 * such (IPv4-mapped and IPv4-compatible IPv6 forms as the IPv4 address, a zone dropped), a host name by
 * what it resolves to when the route is written. A name that does not resolve then (or not within the
 * time-out) is accepted, and nothing is checked again later: a name can resolve elsewhere tomorrow.
 */

/** A port of the agent's own that no route may dial on this host (or on `host`, where it is elsewhere). */
export interface OwnEndpoint {
  port: number;
  /** The configured host, when it names one (Caddy's admin endpoint may be on another host). */
  host: string | undefined;
  /** What it is, for the refusal: "the agent's own API (HOSTKEEPER_LISTEN)". */
  what: string;
}

export interface UpstreamRules {
  /** Ranges no upstream may reach (HOSTKEEPER_UPSTREAM_DENY_CIDRS). */
  deny: readonly string[];
  own: readonly OwnEndpoint[];
  /** How long a host name's resolution is waited for; default 2 s. */
  lookupTimeoutMs?: number;
}

/** The agent's API, Caddy's admin endpoint (over TCP; a unix socket is no dial) and the operator's ports. */
export function ownEndpoints(o: {
  listen: { host: string; port: number } | "off";
  caddyAdmin: CaddyAdminAddress | undefined;
  operatorPorts: { blue: number; green: number };
}): OwnEndpoint[] {
  const own: OwnEndpoint[] = [];
  if (o.listen !== "off")
    own.push({ port: o.listen.port, host: o.listen.host, what: "the agent's own API (HOSTKEEPER_LISTEN)" });
  if (o.caddyAdmin?.kind === "tcp")
    own.push({
      port: Number(o.caddyAdmin.url.port),
      host: o.caddyAdmin.url.hostname.replace(/^\[|\]$/g, ""),
      what: "Caddy's admin endpoint (HOSTKEEPER_CADDY_ADMIN)",
    });
  for (const port of [o.operatorPorts.blue, o.operatorPorts.green])
    own.push({ port, host: undefined, what: "an operator instance's port (HOSTKEEPER_OPERATOR_PORTS)" });
  return own.filter((e) => e.port > 0);
}

/** Addresses that are this host whatever its interfaces: loopback, and "this host" (0.0.0.0, `::`). */
const THIS_HOST = new AddressSet(["127.0.0.0/8", "::1/128", "0.0.0.0/8", "::/128"]);

/**
 * An address in the one form the checks compare: IPv4 dotted, IPv6 canonical; an IPv4-mapped
 * (`::ffff:a9fe:a9fe`) or IPv4-compatible (`::169.254.169.254`) address as its IPv4 address; a zone dropped.
 */
export function canonicalAddress(address: string): string {
  const bare = address.replace(/%.*$/, "");
  if (isIP(bare) !== 6) return bare;
  const host = new URL(`http://[${bare}]/`).hostname.slice(1, -1);
  const v4 = /^::(?:ffff:)?([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
  if (!v4?.[1] || !v4[2]) return host;
  const [hi, lo] = [Number.parseInt(v4[1], 16), Number.parseInt(v4[2], 16)];
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

/** A dial's host and port, from the forms a write request's `dial` takes (see parseDial). */
function hostAndPort(dial: string): HostPort | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d+)$/.exec(dial);
  const host = m?.[1] ?? m?.[2];
  return host === undefined ? undefined : { host, port: Number(m?.[3]) };
}

interface HostPort {
  host: string;
  port: number;
}

/** Host names resolved at once, at most; a request can name thousands (64 paths of 64 upstreams). */
const LOOKUPS_AT_ONCE = 4;

const isAddress = (host: string) => isIP(host.replace(/%.*$/, "")) !== 0;

export class UpstreamCheck {
  private readonly deny: AddressSet;
  private readonly timeoutMs: number;

  constructor(private readonly rules: UpstreamRules) {
    this.deny = new AddressSet(rules.deny);
    this.timeoutMs = rules.lookupTimeoutMs ?? 2000;
  }

  /**
   * What is wrong with a write request's dials, each named by its field (`paths[0].upstreams[1].dial`).
   * Synchronous unless a host name has to be resolved, so a change without one reaches the writer in the
   * order it was asked for.
   */
  requestIssues(
    request: Pick<RouteWriteRequest, "upstreams" | "paths">,
  ): InputIssue[] | Promise<InputIssue[]> {
    const fields = [
      ...request.upstreams.map((u, i) => ({ field: `upstreams[${i}].dial`, dial: u.dial })),
      ...(request.paths ?? []).flatMap((p, j) =>
        p.upstreams.map((u, i) => ({ field: `paths[${j}].upstreams[${i}].dial`, dial: u.dial })),
      ),
    ];
    const dials = fields.flatMap(({ field, dial }) => {
      // A dial that does not parse is the route builder's to refuse.
      const parsed = parseDial(dial);
      const hp = parsed.ok ? hostAndPort(parsed.dial) : undefined;
      return hp === undefined ? [] : [{ field, ...hp }];
    });
    const issues = (resolved: ReadonlyMap<string, string[]>) =>
      dials.flatMap(({ field, ...hp }) => {
        const message = this.refusal(hp, resolved);
        return message === undefined ? [] : [{ field, message }];
      });
    const names = this.namesOf(dials);
    return names.length === 0 ? issues(new Map()) : this.resolveAll(names).then(issues);
  }

  /**
   * What is wrong with a captured route a restore would write (as Caddy held it), as an issue of `field`:
   * its first refused dial. Dials that are no `host:port` (placeholders, unix sockets: never from a write
   * request) are not judged. Synchronous unless a host name has to be resolved, as requestIssues.
   */
  capturedRouteIssues(route: RouteJson, field: string): InputIssue[] | Promise<InputIssue[]> {
    const dials = dialsOf(route).flatMap((dial) => {
      const hp = hostAndPort(dial.replace(/^tcp[46]?\//, ""));
      return hp === undefined ? [] : [{ dial, ...hp }];
    });
    const issues = (resolved: ReadonlyMap<string, string[]>) => {
      for (const { dial, ...hp } of dials) {
        const message = this.refusal(hp, resolved);
        if (message !== undefined)
          return [{ field, message: `names a captured route that dials ${dial}, which ${message}` }];
      }
      return [];
    };
    const names = this.namesOf(dials);
    return names.length === 0 ? issues(new Map()) : this.resolveAll(names).then(issues);
  }

  /** Why the upstream `hp` may not be dialled, or undefined; host names as `resolved` has them. */
  private refusal(hp: HostPort, resolved: ReadonlyMap<string, string[]>): string | undefined {
    const literal = isAddress(hp.host);
    for (const raw of literal ? [hp.host] : (resolved.get(hp.host) ?? [])) {
      const address = canonicalAddress(raw);
      const via = literal ? "" : ` (${hp.host} resolves to it now)`;
      if (this.deny.has(address))
        return `reaches ${address}${via}, in HOSTKEEPER_UPSTREAM_DENY_CIDRS: no route may dial it`;
      const own = this.ownAt(address, hp.port, resolved);
      if (own !== undefined)
        return `reaches ${hostPort({ host: address, port: hp.port })}${via}, ${own}: no route may dial it`;
    }
    return undefined;
  }

  /** The agent's own endpoint `address:port` reaches, if any. */
  private ownAt(address: string, port: number, resolved: ReadonlyMap<string, string[]>): string | undefined {
    for (const e of this.rules.own) {
      if (e.port !== port) continue;
      if (isThisHost(address)) return e.what;
      if (e.host === undefined) continue;
      const at = isAddress(e.host) ? [e.host] : (resolved.get(e.host) ?? []);
      if (at.some((a) => canonicalAddress(a) === address)) return e.what;
    }
    return undefined;
  }

  /** The host names the dials' judgement needs: theirs, and those of own endpoints on their ports. */
  private namesOf(dials: readonly HostPort[]): string[] {
    const names = new Set(dials.map((d) => d.host).filter((h) => !isAddress(h)));
    const ports = new Set(dials.map((d) => d.port));
    for (const e of this.rules.own)
      if (e.host !== undefined && !isAddress(e.host) && ports.has(e.port)) names.add(e.host);
    return [...names];
  }

  /** The addresses of `names`, a few at a time, all within the time-out: a name not resolved by then has none. */
  private async resolveAll(names: readonly string[]): Promise<Map<string, string[]>> {
    const queue = [...names];
    const out = new Map<string, string[]>();
    const deadline = Date.now() + this.timeoutMs;
    const worker = async () => {
      for (let name = queue.shift(); name !== undefined; name = queue.shift())
        out.set(name, await resolve(name, deadline - Date.now()));
    };
    await Promise.all(Array.from({ length: Math.min(LOOKUPS_AT_ONCE, queue.length) }, worker));
    return out;
  }
}

/**
 * A name's addresses now; none when it does not resolve within `ms`. `localhost` and its subdomains are
 * the loopback whatever the resolver says (RFC 6761), as some resolvers answer for them.
 */
async function resolve(name: string, ms: number): Promise<string[]> {
  const n = name.toLowerCase().replace(/\.$/, "");
  const local = n === "localhost" || n.endsWith(".localhost") ? ["127.0.0.1", "::1"] : [];
  if (ms <= 0) return local;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<[]>((r) => {
    timer = setTimeout(() => r([]), ms);
    timer.unref();
  });
  try {
    const found = await Promise.race([lookup(name, { all: true, order: "verbatim" }).catch(() => []), late]);
    return [...local, ...found.map((a) => a.address)];
  } finally {
    clearTimeout(timer);
  }
}

/** Whether `address` (canonical) is this host: loopback, "this host", or an address of its interfaces. */
function isThisHost(address: string): boolean {
  if (THIS_HOST.has(address)) return true;
  return Object.values(networkInterfaces()).some((list) =>
    (list ?? []).some((i) => canonicalAddress(i.address) === address),
  );
}

/** The upstreams a route dials, in its handlers' order, subroutes included. */
export function dialsOf(route: RouteJson | null, dials: string[] = []): string[] {
  for (const h of route?.handle ?? []) {
    if (Array.isArray(h.routes)) for (const sub of h.routes as RouteJson[]) dialsOf(sub, dials);
    const ups = h.upstreams;
    if (!Array.isArray(ups)) continue;
    for (const u of ups as { dial?: unknown }[]) if (typeof u.dial === "string") dials.push(u.dial);
  }
  return dials;
}
