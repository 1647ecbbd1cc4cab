import { createHash } from "node:crypto";
import { join } from "node:path";
import type { RouteJson } from "./routes/plan.js";

/*
 * Per-route access logs, as Caddy holds them (docs/api/proxy-routes.md, Access logs). The route carries the
 * fact: its first handler is a `vars` handler that names the route's logger in `access_logger_names`, so
 * every request the route handles is written by logger `http.log.access.<name>`, and Caddy's config stays
 * the one source of truth (a route read back says `access_log: true`). Around the routes, Caddy needs:
 * - a log in `logging.logs` per logging route that takes that logger's entries and writes the route's file;
 * - the managed server's `logs`, mapping every host of a logging route (`logger_names`) and skipping every
 *   other host (`skip_unmapped_hosts`): Caddy records a request only when its host is mapped, and a host
 *   no route logs costs nothing. The map's names are one that no log takes (OTHER): which file a request
 *   goes to is the route's to say, so a request a logging route did not handle (a host of a route that
 *   does not log under a wildcard that does, a host whose route is not written yet) reaches no file;
 * - `exclude: ["http.log.access"]` on the default log, so no access entry lands in Caddy's own log.
 */

/** The logger (and `logging.logs` key) names the agent's access logs share; none holds a dot. */
export const ACCESS_LOG_PREFIX = "hostkeeper_access_";

/** The name the server's host map gives every host: no log takes it, so only a route's own name writes. */
export const OTHER_LOGGER = "hostkeeper_unrouted";

/** Caddy's access loggers: the default log must not take them. */
export const ACCESS_LOGGER_NAMESPACE = "http.log.access";

/**
 * The logger name of a route: dot-free (a log's `include` takes a name and every name below it, dot by dot:
 * a name with dots could take another route's entries), from a hash of the route id.
 */
export function accessLoggerName(routeId: string): string {
  return ACCESS_LOG_PREFIX + createHash("sha256").update(routeId).digest("hex").slice(0, 16);
}

/**
 * The file a route's log is written to: the route id, so people and tools find it (`*` of a wildcard as
 * `%2A`, which no route id holds). Rolled files beside it are `<id>-<time>.log.gz`.
 */
export function accessLogFile(dir: string, routeId: string): string {
  return join(dir, `${routeId.replace(/\*/g, "%2A")}.log`);
}

/** The handler that makes a route log its requests: first in the route, before anything can answer. */
export function accessLogHandler(routeId: string): Record<string, unknown> {
  return { handler: "vars", access_logger_names: [accessLoggerName(routeId)] };
}

/** Whether `h` is the access log handler of the route `routeId`. */
export function isAccessLogHandler(h: Record<string, unknown> | undefined, routeId: string): boolean {
  if (h?.handler !== "vars" || Object.keys(h).length !== 2) return false;
  const names = h.access_logger_names;
  return Array.isArray(names) && names.length === 1 && names[0] === accessLoggerName(routeId);
}

/** A route that logs: its id and its hosts (domain and `redirect_from`). */
export interface LoggingRoute {
  id: string;
  hosts: string[];
}

/**
 * A route id as the agent derives them (lowercase labels, a leading `*.` for a wildcard): only such a route
 * names a file, so a route written by hand with another id can never point the agent outside the folder.
 */
const ROUTE_ID = /^(?:\*\.)?[a-z0-9_-]+(?:\.[a-z0-9_-]+)*$/;

/** The route's logging, when it logs (its first handler names its logger); else undefined. */
export function loggingOf(route: RouteJson | null | undefined): LoggingRoute | undefined {
  const id = route?.["@id"];
  if (typeof id !== "string" || !ROUTE_ID.test(id) || !isAccessLogHandler(route?.handle?.[0], id))
    return undefined;
  return { id, hosts: route?.match?.flatMap((m) => m.host ?? []) ?? [] };
}

/** The routes among `routes` that log. Caddy's text is looked at first: a server where none logs is not parsed. */
export function loggingRoutesOf(text: string): LoggingRoute[] {
  if (!text.includes('"access_logger_names"')) return [];
  const routes = (JSON.parse(text) as RouteJson[] | null) ?? [];
  return routes.map(loggingOf).filter((r): r is LoggingRoute => r !== undefined);
}

/** How Caddy writes the access log files (HOSTKEEPER_ACCESS_LOG_*). */
export interface AccessLogFiles {
  dir: string;
  rollMb: number;
  keep: number;
}

/** The `logging.logs` entry of a route: its logger's entries only, as JSON lines, rolled by Caddy. */
export function accessLogConfig(routeId: string, files: AccessLogFiles): Record<string, unknown> {
  return {
    writer: {
      output: "file",
      filename: accessLogFile(files.dir, routeId),
      roll: true,
      roll_size_mb: files.rollMb,
      roll_keep: files.keep,
    },
    encoder: { format: "json" },
    include: [`${ACCESS_LOGGER_NAMESPACE}.${accessLoggerName(routeId)}`],
  };
}

/** What Caddy must hold for a set of logging routes: the logs by key, the hosts to map. */
export interface AccessLogState {
  logs: Map<string, Record<string, unknown>>;
  hosts: Set<string>;
}

export function accessLogState(routes: readonly LoggingRoute[], files: AccessLogFiles): AccessLogState {
  const logs = new Map<string, Record<string, unknown>>();
  const hosts = new Set<string>();
  for (const r of routes) {
    logs.set(accessLoggerName(r.id), accessLogConfig(r.id, files));
    for (const h of r.hosts) hosts.add(h.toLowerCase());
  }
  return { logs, hosts };
}

/** The managed server's `logs` for the mapped hosts: recorded only for those, credentials redacted. */
export function serverLogs(hosts: Iterable<string>): Record<string, unknown> {
  const names: Record<string, string[]> = {};
  for (const h of [...hosts].sort()) names[h] = [OTHER_LOGGER];
  // should_log_credentials is left out: Caddy's default writes Authorization, Cookie, Set-Cookie and
  // Proxy-Authorization as REDACTED.
  return { logger_names: names, skip_unmapped_hosts: true };
}

/** Whether a server's `logs` is the agent's: only its name in the host map, only mapped hosts recorded. */
export function isOwnServerLogs(logs: unknown): boolean {
  if (logs === null || typeof logs !== "object") return false;
  const l = logs as { logger_names?: Record<string, unknown>; skip_unmapped_hosts?: unknown };
  return (
    l.skip_unmapped_hosts === true &&
    Object.values(l.logger_names ?? {}).every(
      (v) => (Array.isArray(v) && v.length === 1 && v[0] === OTHER_LOGGER) || v === OTHER_LOGGER,
    )
  );
}
