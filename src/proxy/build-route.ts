import { type InputIssue, InvalidInputError } from "../util/invalid-input.js";
import { normalizeDomain, parseDial } from "./domain.js";
import type { RouteJson } from "./plan.js";
import type { RouteWriteRequest } from "./schemas.js";

/** A route the agent writes: its id (the normalised domain) and the route as Caddy will hold it. */
export interface ManagedRoute {
  id: string;
  route: RouteJson & { "@id": string };
}

/**
 * What a domain rule refuses in a write request (the schema has checked the shapes by then), each field
 * named from the body's top. The callback URL is not the route's: the HTTP edge checks it.
 */
export function routeIssues(request: RouteWriteRequest): InputIssue[] {
  return checked(request).issues;
}

/** Turns a write request into the Caddy route the agent manages; throws `InvalidInputError` (see routeIssues). */
export function buildRoute(request: RouteWriteRequest): ManagedRoute {
  const { issues, id, dials, weights } = checked(request);
  if (issues.length > 0 || id === undefined) throw new InvalidInputError(issues);
  const strategy = request.strategy ?? "first";
  return {
    id,
    route: {
      "@id": id,
      match: [{ host: [id] }],
      handle: [
        {
          handler: "reverse_proxy",
          upstreams: dials.map((dial) => ({ dial })),
          load_balancing: {
            selection_policy:
              strategy === "first" ? { policy: "first" } : { policy: "weighted_round_robin", weights },
          },
        },
      ],
      terminal: request.terminal ?? true,
    },
  };
}

/** The request's normalised id, dials and weights, and what is wrong with it. */
function checked(request: RouteWriteRequest) {
  const issues: InputIssue[] = [];
  const domain = normalizeDomain(request.domain);
  if (!domain.ok) issues.push({ field: "domain", message: domain.message });
  const strategy = request.strategy ?? "first";
  const dials = request.upstreams.map((u, i) => {
    const d = parseDial(u.dial);
    if (!d.ok) issues.push({ field: `upstreams[${i}].dial`, message: d.message });
    return d.ok ? d.dial : u.dial;
  });
  request.upstreams.forEach((u, i) => {
    if (u.weight !== undefined && strategy !== "weighted_round_robin")
      issues.push({
        field: `upstreams[${i}].weight`,
        message: "is only allowed with strategy weighted_round_robin",
      });
  });
  const weights = request.upstreams.map((u) => u.weight ?? 1);
  if (strategy === "weighted_round_robin" && weights.reduce((a, b) => a + b, 0) <= 0)
    issues.push({ field: "upstreams", message: "weights must sum to more than 0" });
  return { issues, id: domain.ok ? domain.domain : undefined, dials, weights };
}
