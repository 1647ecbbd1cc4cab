import { isAccessLogHandler } from "../../caddy/access-log-json.js";
import type { RouteJson } from "../../caddy/routes/plan.js";
import { sameJson } from "../../util/canonical-json.js";
import type { HeaderOps, RouteWriteRequest } from "../write-schemas.js";
import { DECOY_USER, isDecoyRoute } from "./basic-auth.js";
import { buildRoute } from "./build-route.js";
import { isPlainHttpMarker } from "./https-redirect.js";
import { unliteral } from "./policies.js";
import { withStreamCloseDelay } from "./streams.js";

/*
 * A route read back in the shape it was written: the write request that makes exactly the route Caddy
 * holds. The route is read, the request it implies is built again, and only when that request makes the
 * same route (the connection settings aside) is it the answer: a route written by hand, or changed in
 * Caddy since, has none. What comes back is the request in its normalised form: the domain and hosts as
 * route ids, defaults filled in, paths longest prefix first.
 */

type Json = Record<string, unknown>;
type Written = Omit<RouteWriteRequest, "callback_url">;

/** The write request that makes `route`, or undefined when no write request makes exactly it. */
export function writtenRequest(route: RouteJson): Written | undefined {
  const bare = withStreamCloseDelay(route, 0);
  let request: Written | undefined;
  try {
    request = readRoute(bare);
    if (request === undefined) return undefined;
    const rebuilt = buildRoute(request).route;
    return sameJson(rebuilt, bare) ? request : undefined;
  } catch {
    // A shape the reader does not expect, or a request that does not validate: not the agent's route.
    return undefined;
  }
}

function readRoute(route: RouteJson): Written | undefined {
  const hosts = route.match?.[0]?.host;
  const [domain = "", ...redirects] = hosts ?? [];
  // A route that logs starts with its access log handler; the rest is read as any route's.
  const logs = isAccessLogHandler(route.handle?.[0], domain);
  const marked = logs ? route.handle?.slice(1) : route.handle;
  // Then, for a route served on plain HTTP too, the opt-out's marker.
  const plain = isPlainHttpMarker(marked?.[0]);
  const handle = plain ? marked?.slice(1) : marked;
  if (!hosts || hosts.length === 0 || !handle || handle.length !== 1) return undefined;
  const base = {
    domain,
    terminal: route.terminal ?? false,
    ...(logs ? { access_log: true } : {}),
    ...(plain ? { https_redirect: false } : {}),
  };
  const h = handle[0] as Json;
  if (h.handler === "reverse_proxy") return { ...base, ...balanced(h) };
  if (h.handler !== "subroute" || !Array.isArray(h.routes)) return undefined;
  const request: Written = { ...base, upstreams: [] };
  if (redirects.length > 0) request.redirect_from = redirects;
  for (const sub of h.routes as RouteJson[]) readSubroute(sub, request);
  return request;
}

/** One subroute of a route with policies, read into `request` by what it holds. */
function readSubroute(sub: RouteJson, request: Written): void {
  const handlers = (sub.handle ?? []) as Json[];
  const first = handlers[0] ?? {};
  const match = sub.match?.[0] as Json | undefined;
  if (match?.host) request.redirect_status = first.status_code as 301 | 302 | 307 | 308;
  // Made from `basic_auth` alone: the route built again from the request shows it is the one expected.
  else if (isDecoyRoute(sub)) return;
  else if (match?.not)
    request.allow_ips = ((match.not as Json[])[0]?.client_ip as Json | undefined)?.ranges as string[];
  else if (match?.path) {
    const last = handlers[handlers.length - 1] ?? {};
    const prefix = (match.path as string[])[0] ?? "";
    const strip = handlers.length === 2;
    request.paths = [
      ...(request.paths ?? []),
      { prefix, ...balanced(last), ...(strip ? { strip_prefix: true } : {}) },
    ];
  } else if (first.handler === "reverse_proxy") Object.assign(request, balanced(first));
  else if (first.handler === "static_response") request.maintenance = maintenance(first);
  else for (const h of handlers) readMiddle(h, request);
}

function readMiddle(h: Json, request: Written): void {
  if (h.handler === "authentication") {
    const basic = (h.providers as Json).http_basic as Json;
    const accounts = basic.accounts as { username: string; password: string }[];
    request.basic_auth = {
      realm: basic.realm as string,
      users: accounts
        .filter((a) => a.username !== DECOY_USER)
        .map((a) => ({ username: unliteral(a.username), password_hash: a.password })),
    };
  } else if (h.handler === "encode") request.encode = h.prefer as ("zstd" | "gzip")[];
  else if (h.handler === "headers") {
    const headers: NonNullable<Written["headers"]> = {};
    if (h.request) headers.request = ops(h.request as Json);
    if (h.response) headers.response = ops(h.response as Json);
    request.headers = headers;
  }
}

function ops(o: Json): HeaderOps {
  const out: HeaderOps = {};
  if (o.set)
    out.set = Object.fromEntries(
      Object.entries(o.set as Record<string, string[]>).map(([name, [value = ""]]) => [
        name,
        unliteral(value),
      ]),
    );
  if (o.delete) out.delete = o.delete as string[];
  return out;
}

function maintenance(h: Json): NonNullable<Written["maintenance"]> {
  const headers = h.headers as Record<string, string[]>;
  const retry = headers["Retry-After"]?.[0];
  return {
    status: h.status_code as number,
    ...(retry === undefined ? {} : { retry_after: Number(retry) }),
    ...(typeof h.body === "string" ? { body: unliteral(h.body) } : {}),
    content_type: unliteral(headers["Content-Type"]?.[0] ?? ""),
  };
}

/** Upstreams and strategy of a `reverse_proxy` handler, as a request gives them. */
function balanced(h: Json): Pick<Written, "upstreams" | "strategy"> {
  const dials = (h.upstreams as { dial: string }[]).map((u) => u.dial);
  const policy = (h.load_balancing as Json).selection_policy as { policy: string; weights?: number[] };
  if (policy.policy === "first") return { upstreams: dials.map((dial) => ({ dial })), strategy: "first" };
  return {
    upstreams: dials.map((dial, i) => ({ dial, weight: policy.weights?.[i] ?? 1 })),
    strategy: "weighted_round_robin",
  };
}
