import { sameJson } from "../../util/canonical-json.js";
import type { Plan, RouteJson } from "./plan.js";

/** A route that leads the managed server's routes, as its maker builds it. */
export type LeadRoute = RouteJson & { "@id": string };

/**
 * A route the agent keeps ahead of every other route of the managed server (the HTTPS redirect,
 * proxy/route/https-redirect.ts), made from the routes behind it. Its `@id` starts with
 * `AGENT_ROUTE_ID_PREFIX`, so plans never place a route before it (plan.ts `indexRoutes`). It is put in
 * place by the start's conformance and made again by a plan only when the plan's changes touch what it is
 * made from (`dependsOn`), so a change that does not costs nothing more.
 */
export interface LeadingRoute {
  readonly id: string;
  /** The route that must lead `routes` (the routes behind it), or undefined when none must. */
  wanted(routes: readonly RouteJson[]): LeadRoute | undefined;
  /** Whether writing or removing `route` may change what `wanted` gives. */
  dependsOn(route: RouteJson): boolean;
  /** Whether Caddy's text of the routes surely leads with the route `wanted` gives: spares parsing them. */
  settledIn(text: string): boolean;
}

/**
 * `routes` led by the route `lead` wants for them, every other route of its id dropped; `routes` itself
 * when that is what they are already.
 */
export function withLead(routes: RouteJson[], lead: LeadingRoute): RouteJson[] {
  const behind = routes.filter((r) => r["@id"] !== lead.id);
  const want = lead.wanted(behind);
  const next = want === undefined ? behind : [want, ...behind];
  if (next.length === routes.length && (want === undefined || sameJson(routes[0], want))) return routes;
  return next;
}

/**
 * Brings a plan's routes in line with `lead` after its changes: when they lack the lead, or a change
 * touched what it is made from, the lead is made again and, where it differs, put first as one more
 * applied change (its `index` is -1: no submitted change is it). Otherwise the plan is left as it is,
 * without looking at the routes.
 */
export function leadPlan(p: Plan, lead: LeadingRoute): void {
  const first = p.routes[0];
  const present = first?.["@id"] === lead.id;
  if (present && !touches(p, lead)) return;
  // None must lead: one left from before is the start's conformance's to take away.
  if (!present && lead.wanted([]) === undefined) return;
  const next = withLead(p.routes, lead);
  if (next === p.routes) return;
  p.routes = next;
  const want = next[0]?.["@id"] === lead.id ? (next[0] as LeadRoute) : undefined;
  if (want === undefined)
    p.applied.push({ index: -1, op: { kind: "delete", id: lead.id }, at: 0, wasPresent: true });
  else p.applied.push({ index: -1, op: { kind: "put", route: want }, at: 0, wasPresent: present });
}

/** Whether a change the plan applies writes or removes a route `lead` is made from. */
function touches(p: Plan, lead: LeadingRoute): boolean {
  return p.applied.some(({ index, op }) => {
    const end = p.outcomes[index];
    if (op.kind !== "delete" && lead.dependsOn(op.route)) return true;
    return end?.previous != null && lead.dependsOn(end.previous);
  });
}
