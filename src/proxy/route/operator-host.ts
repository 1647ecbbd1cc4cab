import { domainToASCII } from "node:url";
import type { RouteJson } from "../../caddy/routes/plan.js";
import type { RouteWriteRequest } from "../write-schemas.js";
import { normalizeDomain } from "./domain.js";

/*
 * The operator's domain is the agent's alone: no route or custom certificate written through the API may
 * answer for it. Caddy's host matcher and its certificate lookup (certmagic) both compare labels: a `*`
 * label stands for any one label (`*.example.com` takes `op.example.com`, not `a.op.example.com`; the
 * lookup also tries `*.*.com`), names case-insensitively and IDNs as punycode. The comparison here is that
 * rule on names brought to one spelling, so no spelling of a name gets past it.
 */

/** IDNA's label separators: the full stop and the ideographic and full-width ones it maps to it. */
const SEPARATORS = /[.\u3002\uff0e\uff61]/;

/** A name's labels, trimmed, lowercase, one trailing dot dropped, each Unicode label as punycode. */
function labelsOf(name: string): string[] {
  const labels = name.trim().toLowerCase().split(SEPARATORS);
  if (labels.length > 1 && labels[labels.length - 1] === "") labels.pop();
  return labels.map((l) => (l === "*" || l === "" ? l : domainToASCII(l) || l));
}

/**
 * Whether one host could be named by both `a` and `b` (host names, route hosts or certificate names):
 * as many labels, each pair equal or one of them `*`. A name holding a Caddy placeholder (`{...}`) could
 * become any host, so it overlaps every name.
 */
export function namesOverlap(a: string, b: string): boolean {
  if (a.includes("{") || b.includes("{")) return true;
  const x = labelsOf(a);
  const y = labelsOf(b);
  return x.length === y.length && x.every((label, i) => label === "*" || y[i] === "*" || label === y[i]);
}

/**
 * What in a route would take requests for `operatorDomain`: the host of its matchers that covers it, null
 * for a matcher set without a host matcher (or a route without matchers), which takes every host;
 * undefined when nothing does. Only the route's own matchers count: handlers inside it see the requests
 * those let through.
 */
export function operatorHostOf(route: RouteJson, operatorDomain: string): string | null | undefined {
  const sets = route.match;
  if (!Array.isArray(sets) || sets.length === 0) return null;
  for (const set of sets) {
    if (!Array.isArray(set.host)) return null;
    const host = set.host.find((h) => typeof h === "string" && namesOverlap(h, operatorDomain));
    if (host !== undefined) return host;
  }
  return undefined;
}

/** Where a host of the route a write request built comes from, for the refusal's detail. */
export function requestFieldOf(request: RouteWriteRequest, id: string, host: string | null): string {
  if (host === id) return `domain ${id}`;
  const i = (request.redirect_from ?? []).findIndex((h) => {
    const d = normalizeDomain(h);
    return d.ok && d.domain === host;
  });
  return i === -1 ? `the route's host ${String(host)}` : `redirect_from[${i}] (${String(host)})`;
}
