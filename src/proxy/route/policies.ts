import type { Encoding, HeaderOps, Headers, Maintenance } from "../write-schemas.js";
import { bcryptCost, decoyAccount, decoyRoute } from "./basic-auth.js";

/*
 * A route's site policies as Caddy handlers. The order inside a route, for every request: a redirect
 * host's redirect, then `allow_ips`, `basic_auth` (credentials that name none of its users go to a decoy,
 * see basic-auth.ts), then compression and the header changes (so they apply to the maintenance page as to
 * the upstreams' answers), then the maintenance page or the paths and the route's own upstreams. Caddy's
 * own 401 and 403 come before the header changes and compression: they get neither
 * (docs/api/proxy-routes.md).
 */

export type Strategy = "first" | "weighted_round_robin";

/** Upstreams with their selection policy, validated. */
export interface Balanced {
  dials: string[];
  weights: number[];
  strategy: Strategy;
}

/** A route's policies, validated and normalised (hosts as route ids, defaults filled in). */
export interface SitePolicies {
  domain: string;
  redirectFrom: string[];
  redirectStatus: number;
  paths: { prefix: string; upstreams: Balanced; strip: boolean }[];
  basicAuth: { realm: string; users: { username: string; password_hash: string }[] } | undefined;
  allowIps: string[] | undefined;
  headers: Headers | undefined;
  maintenance: Maintenance | undefined;
  encode: Encoding[] | undefined;
}

type Handler = Record<string, unknown>;
type SubRoute = { match?: Record<string, unknown>[]; handle: Handler[]; terminal?: boolean };

export const DEFAULT_REDIRECT_STATUS = 308;
export const DEFAULT_MAINTENANCE_STATUS = 503;
export const DEFAULT_MAINTENANCE_TYPE = "text/html; charset=utf-8";

/**
 * Caddy expands placeholders (`{env.X}`, `{file./path}`, request values) in most strings it is given, and
 * takes `\{` and `\}` as literal braces: text from a caller goes through this, so it reaches clients as
 * sent and never reads Caddy's environment or files. Strings Caddy does not expand (the realm) must not.
 */
export const literal = (text: string): string => text.replace(/[{}]/g, "\\$&");

/** What `literal` escaped, as it was: a backslash is dropped only where it precedes a brace. */
export const unliteral = (text: string): string => text.replace(/\\([{}])/g, "$1");

/** The `reverse_proxy` handler of a set of upstreams. */
export function reverseProxy(b: Balanced): Handler {
  return {
    handler: "reverse_proxy",
    upstreams: b.dials.map((dial) => ({ dial })),
    load_balancing: {
      selection_policy:
        b.strategy === "first" ? { policy: "first" } : { policy: "weighted_round_robin", weights: b.weights },
    },
  };
}

/** The handlers of a route with policies: one subroute holding them in order. */
export function siteHandlers(site: SitePolicies, upstreams: Balanced): Handler[] {
  const routes: SubRoute[] = [];
  if (site.redirectFrom.length > 0)
    routes.push({
      match: [{ host: site.redirectFrom }],
      handle: [
        {
          handler: "static_response",
          status_code: site.redirectStatus,
          headers: { Location: [`{http.request.scheme}://${site.domain}{http.request.uri}`] },
        },
      ],
      terminal: true,
    });
  if (site.allowIps)
    routes.push({
      match: [{ not: [{ client_ip: { ranges: site.allowIps } }] }],
      handle: [{ handler: "static_response", status_code: 403 }],
      terminal: true,
    });
  if (site.basicAuth) routes.push(decoyRoute(site.basicAuth.users.map((u) => u.username)));
  const middle = [...authentication(site), ...encoding(site.encode), ...headerHandler(site.headers)];
  if (middle.length > 0) routes.push({ handle: middle });
  // The page goes before the paths and upstreams, which stay: a write without it puts traffic back.
  if (site.maintenance) routes.push({ handle: [maintenancePage(site.maintenance)], terminal: true });
  routes.push(...pathRoutes(site), { handle: [reverseProxy(upstreams)], terminal: true });
  return [{ handler: "subroute", routes }];
}

function authentication(site: SitePolicies): Handler[] {
  const auth = site.basicAuth;
  if (!auth) return [];
  // The users' one cost was checked (`basicAuthIssues`): the decoy takes it.
  const cost = bcryptCost(auth.users[0]?.password_hash ?? "");
  if (cost === undefined) throw new Error("basic_auth without a bcrypt cost reached the compiler");
  return [
    {
      handler: "authentication",
      providers: {
        http_basic: {
          // Not `literal`: Caddy expands placeholders in usernames (once, at load), not in the realm.
          accounts: [
            ...auth.users.map((u) => ({ username: literal(u.username), password: u.password_hash })),
            decoyAccount(cost),
          ],
          hash: { algorithm: "bcrypt" },
          // Without it every request of a signed-in user costs a full bcrypt hash.
          hash_cache: {},
          realm: auth.realm,
        },
      },
    },
  ];
}

function encoding(encode: Encoding[] | undefined): Handler[] {
  if (!encode) return [];
  return [
    { handler: "encode", encodings: Object.fromEntries(encode.map((e) => [e, {}])), prefer: [...encode] },
  ];
}

function headerHandler(headers: Headers | undefined): Handler[] {
  if (!headers?.request && !headers?.response) return [];
  const h: Handler = { handler: "headers" };
  if (headers.request) h.request = headerOps(headers.request);
  // Deferred: applied to the upstream's answer as it leaves, or `set` appends and `delete` misses its headers.
  if (headers.response) h.response = { ...headerOps(headers.response), deferred: true };
  return [h];
}

function headerOps(ops: HeaderOps): Handler {
  const out: Handler = {};
  if (ops.set)
    out.set = Object.fromEntries(Object.entries(ops.set).map(([name, value]) => [name, [literal(value)]]));
  if (ops.delete) out.delete = [...ops.delete];
  return out;
}

function maintenancePage(m: Maintenance): Handler {
  const headers: Record<string, string[]> = {
    "Content-Type": [literal(m.content_type ?? DEFAULT_MAINTENANCE_TYPE)],
  };
  if (m.retry_after !== undefined) headers["Retry-After"] = [String(m.retry_after)];
  return {
    handler: "static_response",
    status_code: m.status ?? DEFAULT_MAINTENANCE_STATUS,
    headers,
    ...(m.body === undefined ? {} : { body: literal(m.body) }),
  };
}

/** One subroute per prefix, longest first: the longest prefix that takes the path wins. */
function pathRoutes(site: SitePolicies): SubRoute[] {
  return [...site.paths]
    .sort((a, b) => b.prefix.length - a.prefix.length)
    .map((p) => ({
      match: [{ path: [p.prefix, `${p.prefix}/*`] }],
      handle: [
        ...(p.strip ? [{ handler: "rewrite", strip_path_prefix: p.prefix }] : []),
        reverseProxy(p.upstreams),
      ],
      terminal: true,
    }));
}
