import type { CaddyConfig } from "./config.js";
import { type Issuance, issuancePolicy } from "./issuance.js";
import { AGENT_ROUTE_ID_PREFIX, type RouteJson } from "./routes/plan.js";

/*
 * On-demand issuance for wildcard routes, as Caddy's TLS app holds it: a policy of the agent's naming the
 * routes' wildcard hosts with `on_demand` (Caddy then gets a certificate per host at its first handshake,
 * rather than trying for the wildcard name, which HTTP and TLS-ALPN challenges cannot prove), and the
 * permission Caddy asks before each: the agent's loopback endpoint (certificates/on-demand-ask.ts).
 */

/** The `@id` of the agent's on-demand policy, which no route id can take. */
export const ON_DEMAND_POLICY_ID = `${AGENT_ROUTE_ID_PREFIX}on-demand`;

const POLICIES = ["apps", "tls", "automation", "policies"];
const ON_DEMAND = ["apps", "tls", "automation", "on_demand"];

/** The wildcard hosts of a route's matchers, lowercase. */
export const wildcardHosts = (route: RouteJson | null | undefined): string[] =>
  (route?.match ?? [])
    .flatMap((m) => m.host ?? [])
    .filter((h) => h.startsWith("*."))
    .map((h) => h.toLowerCase());

/** The agent's on-demand policy for `subjects`, with the issuer its catch-all policy has (Caddy's defaults when none). */
export function onDemandPolicy(s: Issuance, subjects: readonly string[]): Record<string, unknown> {
  const issuers = issuancePolicy(s)?.issuers;
  return {
    "@id": ON_DEMAND_POLICY_ID,
    subjects: [...subjects].sort(),
    ...(issuers ? { issuers } : {}),
    on_demand: true,
  };
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

const isCatchAll = (p: unknown) =>
  isObject(p) && (!Array.isArray(p.subjects) || (p.subjects as unknown[]).length === 0);

/**
 * Caddy's policies with the agent's on-demand policy in place, or gone (`policy` undefined): others kept
 * where they are, the agent's before the first catch-all (Caddy takes the first policy that names a host).
 */
export function policiesWithOnDemand(current: unknown, policy: Record<string, unknown> | undefined): unknown {
  const list = Array.isArray(current) ? (current as unknown[]) : [];
  const others = list.filter((p) => !(isObject(p) && p["@id"] === ON_DEMAND_POLICY_ID));
  if (policy === undefined)
    return others.length === list.length ? current : others.length ? others : undefined;
  const at = others.findIndex(isCatchAll);
  const cut = at === -1 ? others.length : at;
  return [...others.slice(0, cut), policy, ...others.slice(cut)];
}

/** What the TLS app must hold for on-demand issuance: its policy's subjects, and the endpoint Caddy asks. */
export interface OnDemandState {
  subjects: readonly string[];
  /** The permission endpoint's URL; undefined leaves Caddy's as it is. */
  endpoint: string | undefined;
}

/**
 * Brings the TLS app in line with `state`: the permission endpoint first (Caddy refuses an on-demand policy
 * for wildcard names without one), then the policy, each one config change made only when it differs.
 * `mode` "add" keeps subjects Caddy has beside the wanted ones (before a batch: nothing is taken away while
 * a change may still need it); "exact" leaves only the wanted ones. True when anything was written.
 */
export async function bringOnDemandInLine(
  config: CaddyConfig,
  s: Issuance,
  state: OnDemandState,
  mode: "add" | "exact",
): Promise<boolean> {
  let wrote = false;
  const endpoint = state.endpoint;
  if (endpoint !== undefined && state.subjects.length > 0) {
    const want = { permission: { module: "http", endpoint } };
    const done = await config.update(
      ON_DEMAND,
      (current) => (isObject(current) && sameEndpoint(current, endpoint) ? current : want),
      { needs: 1 },
    );
    wrote ||= done.written;
  }
  const done = await config.update(
    POLICIES,
    (current) => {
      const held = Array.isArray(current)
        ? (current as unknown[]).find((p) => isObject(p) && p["@id"] === ON_DEMAND_POLICY_ID)
        : undefined;
      const kept =
        mode === "add" && isObject(held) && Array.isArray(held.subjects) ? (held.subjects as string[]) : [];
      const subjects = [...new Set([...kept, ...state.subjects])];
      return policiesWithOnDemand(current, subjects.length === 0 ? undefined : onDemandPolicy(s, subjects));
    },
    { needs: 1 },
  );
  return wrote || done.written;
}

const sameEndpoint = (current: Record<string, unknown>, endpoint: string): boolean => {
  const p = current.permission;
  return isObject(p) && p.module === "http" && p.endpoint === endpoint && Object.keys(current).length === 1;
};
