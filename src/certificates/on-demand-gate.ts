import type { Logger } from "pino";
import type { RoutesStore } from "../caddy/routes/caddy-routes.js";
import { type RouteJson, routeShadows } from "../caddy/routes/plan.js";
import type { OnDemandHosts } from "./on-demand-store.js";

/** Why the gate answered as it did: the answer's body and its log line's `verdict`. */
export type OnDemandVerdict =
  | "exact_route"
  | "allowed_before"
  | "allowed"
  | "no_route"
  | "not_a_name"
  | "route_limit"
  | "rate_limit"
  | "routes_unreadable";

export interface OnDemandLimits {
  /** Hosts of one wildcard route that may be allowed (HOSTKEEPER_ON_DEMAND_MAX_PER_ROUTE). */
  maxPerRoute: number;
  /** New hosts allowed per minute, all routes together (HOSTKEEPER_ON_DEMAND_RATE). */
  perMinute: number;
}

const RATE_WINDOW_MS = 60_000;

/**
 * A DNS name as Caddy asks for it: labels of letters, digits and hyphens (punycode included), the last not
 * all digits (an IP address is no route's host to certify).
 */
const NAME =
  /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.[a-z0-9-]*[a-z-][a-z0-9-]*$/;

/** Whether a route has a wildcard host and takes requests for `host` (Caddy's matcher: one label per `*`). */
const wildcardServes = (r: RouteJson | undefined, host: string): boolean =>
  r !== undefined &&
  (r.match ?? []).some((m) => (m.host ?? []).some((p) => p.includes("*"))) &&
  routeShadows(r, host);

/**
 * Whether Caddy may get a certificate for a host at its first TLS handshake (on-demand issuance): yes for a
 * host a route serves as an exact host (Caddy names such a host under a wildcard route's policy too), and
 * for a host the first wildcard route taking it serves, while that route has had fewer than `maxPerRoute`
 * hosts allowed and the minute fewer than `perMinute` new ones; a host allowed once stays allowed. No for
 * anything else, so no ACME order is placed for it.
 */
export class OnDemandGate {
  /** When each of the last minute's new hosts was allowed. */
  private readonly recent: number[] = [];

  constructor(
    private readonly o: {
      routes: Pick<RoutesStore, "current">;
      hosts: OnDemandHosts;
      limits: OnDemandLimits;
      log: Logger;
      now?: () => number;
    },
  ) {}

  async decide(asked: string): Promise<{ allowed: boolean; verdict: OnDemandVerdict }> {
    const host = asked.trim().toLowerCase().replace(/\.$/, "");
    const verdict = NAME.test(host) ? await this.verdict(host) : "not_a_name";
    const allowed = verdict === "exact_route" || verdict === "allowed_before" || verdict === "allowed";
    this.o.log[allowed ? "info" : "warn"](
      { host: asked, verdict },
      allowed ? "on-demand certificate allowed" : "on-demand certificate refused",
    );
    return { allowed, verdict };
  }

  private async verdict(host: string): Promise<OnDemandVerdict> {
    let routes: readonly RouteJson[];
    let exact: boolean;
    let wide: readonly number[];
    try {
      const { state } = await this.o.routes.current();
      routes = state.routes;
      exact = state.index.byHost.has(host);
      wide = state.index.anyHost;
    } catch (err) {
      this.o.log.warn({ err }, "on-demand permission: could not read the routes");
      return "routes_unreadable";
    }
    if (exact) return "exact_route";
    const route = wide.map((i) => routes[i]).find((r) => wildcardServes(r, host));
    const id = route?.["@id"];
    if (typeof id !== "string") return "no_route";
    const { hosts, limits } = this.o;
    if (hosts.has(id, host)) return "allowed_before";
    if (hosts.count(id) >= limits.maxPerRoute) return "route_limit";
    const now = (this.o.now ?? Date.now)();
    while (this.recent.length > 0 && (this.recent[0] as number) <= now - RATE_WINDOW_MS) this.recent.shift();
    if (this.recent.length >= limits.perMinute) return "rate_limit";
    this.recent.push(now);
    hosts.add(id, host, new Date(now));
    return "allowed";
  }
}
