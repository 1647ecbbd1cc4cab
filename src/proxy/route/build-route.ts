import { accessLogHandler } from "../../caddy/access-log-json.js";
import type { RouteJson } from "../../caddy/routes/plan.js";
import { type InputIssue, InvalidInputError } from "../../util/invalid-input.js";
import type { RouteWriteRequest } from "../write-schemas.js";
import { normalizeDomain, parseDial } from "./domain.js";
import { PLAIN_HTTP_MARKER } from "./https-redirect.js";
import {
  type Balanced,
  DEFAULT_REDIRECT_STATUS,
  reverseProxy,
  type SitePolicies,
  siteHandlers,
} from "./policies.js";
import {
  allowIpIssues,
  basicAuthIssues,
  headerIssues,
  maintenanceIssues,
  pathIssues,
  redirectHosts,
} from "./policy-checks.js";

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
  const { issues, site, upstreams } = checked(request);
  if (issues.length > 0 || site === undefined) throw new InvalidInputError(issues);
  const id = site.domain;
  const policies = hasPolicies(request) ? siteHandlers(site, upstreams) : [reverseProxy(upstreams)];
  // The opt-out's marker leads, so the HTTPS redirect finds it without reading the route's policies.
  const handle = request.https_redirect === false ? [{ ...PLAIN_HTTP_MARKER }, ...policies] : policies;
  return {
    id,
    route: {
      "@id": id,
      match: [{ host: [id, ...site.redirectFrom] }],
      // First, so every request the route handles is logged, whatever answers it.
      handle: request.access_log === true ? [accessLogHandler(id), ...handle] : handle,
      terminal: request.terminal ?? true,
    },
  };
}

/**
 * Whether the request asks for any site policy: a route without one is written as plain `reverse_proxy`.
 * `headers: {}` changes no header, so it is none: as a policy it would compile to a subroute that no
 * request reads back from (the request read from it has no headers, and builds the plain route).
 */
const hasPolicies = (r: RouteWriteRequest): boolean =>
  r.redirect_from !== undefined ||
  r.paths !== undefined ||
  r.basic_auth !== undefined ||
  r.allow_ips !== undefined ||
  r.headers?.request !== undefined ||
  r.headers?.response !== undefined ||
  r.maintenance !== undefined ||
  r.encode !== undefined;

/** The request's policies validated and normalised, and what is wrong with it (site undefined then). */
function checked(request: RouteWriteRequest) {
  const issues: InputIssue[] = [];
  const domain = normalizeDomain(request.domain);
  if (!domain.ok) issues.push({ field: "domain", message: domain.message });
  const id = domain.ok ? domain.domain : undefined;
  const upstreams = balanced(request, "", issues);
  const redirectFrom = redirectHosts(request, id, issues);
  pathIssues(request.paths, issues);
  const paths = (request.paths ?? []).map((p, i) => ({
    prefix: p.prefix,
    upstreams: balanced(p, `paths[${i}].`, issues),
    strip: p.strip_prefix ?? false,
  }));
  basicAuthIssues(request.basic_auth, issues);
  allowIpIssues(request.allow_ips, issues);
  headerIssues(request.headers, issues);
  maintenanceIssues(request.maintenance, issues);
  const auth = request.basic_auth;
  const site: SitePolicies | undefined =
    id === undefined || issues.length > 0
      ? undefined
      : {
          domain: id,
          redirectFrom,
          redirectStatus: request.redirect_status ?? DEFAULT_REDIRECT_STATUS,
          paths,
          basicAuth: auth && { realm: auth.realm ?? id, users: auth.users },
          allowIps: request.allow_ips,
          headers: request.headers,
          maintenance: request.maintenance,
          encode: request.encode,
        };
  return { issues, site, upstreams };
}

/** Upstreams with their strategy, validated; `at` is where they are in the body (`""` or `paths[2].`). */
function balanced(
  u: Pick<RouteWriteRequest, "upstreams" | "strategy">,
  at: string,
  issues: InputIssue[],
): Balanced {
  const strategy = u.strategy ?? "first";
  const dials = u.upstreams.map((up, i) => {
    const d = parseDial(up.dial);
    if (!d.ok) issues.push({ field: `${at}upstreams[${i}].dial`, message: d.message });
    return d.ok ? d.dial : up.dial;
  });
  u.upstreams.forEach((up, i) => {
    if (up.weight !== undefined && strategy !== "weighted_round_robin")
      issues.push({
        field: `${at}upstreams[${i}].weight`,
        message: "is only allowed with strategy weighted_round_robin",
      });
  });
  const weights = u.upstreams.map((up) => up.weight ?? 1);
  if (strategy === "weighted_round_robin" && weights.reduce((a, b) => a + b, 0) <= 0)
    issues.push({ field: `${at}upstreams`, message: "weights must sum to more than 0" });
  return { dials, weights, strategy };
}
