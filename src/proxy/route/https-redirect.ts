import { goJson } from "../../caddy/routes/etag.js";
import type { LeadingRoute, LeadRoute } from "../../caddy/routes/leading-route.js";
import { AGENT_ROUTE_ID_PREFIX, type RouteJson } from "../../caddy/routes/plan.js";

/*
 * Plain HTTP answers 308 to HTTPS for every host of the managed server, except the hosts of routes written
 * with `https_redirect: false`. One route does it, the agent's own, ahead of all others: a redirect inside
 * every route would double what Caddy does per config load at 20,000 routes (docs/decisions/
 * https-redirect-per-route.md). Caddy answers ACME's HTTP challenges before any route, so they still pass.
 */

/** The `@id` of the redirect route. */
export const HTTPS_REDIRECT_ID = `${AGENT_ROUTE_ID_PREFIX}https-redirect`;

/**
 * What marks a route written with `https_redirect: false`: a `vars` handler setting a variable no one reads
 * (Caddy refuses unknown fields in a route, not in `vars`). Read back as that field, and what the redirect
 * route leaves out.
 */
const OPT_OUT_VAR = "hostkeeper_https_redirect";
export const PLAIN_HTTP_MARKER: Readonly<Record<string, unknown>> = { handler: "vars", [OPT_OUT_VAR]: "off" };

/** Whether a handler is the opt-out's marker. */
export function isPlainHttpMarker(h: unknown): boolean {
  if (typeof h !== "object" || h === null) return false;
  const o = h as Record<string, unknown>;
  return o.handler === "vars" && o[OPT_OUT_VAR] === "off" && Object.keys(o).length === 2;
}

/** Whether a route carries the opt-out's marker (first, or after its access log handler). */
export const optsOut = (route: RouteJson): boolean =>
  Array.isArray(route.handle) && route.handle.slice(0, 2).some(isPlainHttpMarker);

export interface HttpsRedirectSettings {
  /** Whether plain HTTP redirects at all: the managed server serves TLS and the agent applies its issuer. */
  enabled: boolean;
  /** Caddy's `https_port`: where the redirect points (left out of the URL when 443). */
  httpsPort: number;
}

/** The redirect route for `routes`: every plain-HTTP request except for the hosts of those opting out. */
export function redirectRoute(s: HttpsRedirectSettings, routes: readonly RouteJson[]): LeadRoute {
  const port = s.httpsPort === 443 ? "" : `:${s.httpsPort}`;
  const kept = routes.filter(optsOut).flatMap((r) => r.match?.flatMap((m) => m.host ?? []) ?? []);
  const plain = [...new Set(kept)];
  return {
    "@id": HTTPS_REDIRECT_ID,
    match: [{ protocol: "http", ...(plain.length === 0 ? {} : { not: [{ host: plain }] }) }],
    handle: [
      {
        handler: "static_response",
        headers: { Location: [`https://{http.request.host}${port}{http.request.uri}`] },
        status_code: 308,
      },
    ],
  };
}

/** The redirect as the routes' leading route (caddy/routes/leading-route.ts); none when it is not enabled. */
export function httpsRedirect(s: HttpsRedirectSettings): LeadingRoute {
  // What Caddy's text of the routes starts with when no route opts out.
  const plainStart = `[${goJson(redirectRoute(s, [])).trimEnd()}`;
  const idText = `"${HTTPS_REDIRECT_ID}"`;
  return {
    id: HTTPS_REDIRECT_ID,
    wanted: (routes) => (s.enabled ? redirectRoute(s, routes) : undefined),
    dependsOn: (route) => s.enabled && optsOut(route),
    settledIn: (text) => {
      if (!s.enabled) return !text.includes(idText);
      // A route opting out changes the redirect: the routes are parsed to find its hosts.
      if (text.includes(`"${OPT_OUT_VAR}"`)) return false;
      const next = text[plainStart.length];
      const led = text.startsWith(plainStart) && (next === "," || next === "]");
      return led && text.indexOf(idText, plainStart.length) === -1;
    },
  };
}
