import { sameJson } from "../util/canonical-json.js";
import {
  ACCESS_LOG_PREFIX,
  ACCESS_LOGGER_NAMESPACE,
  type AccessLogState,
  isOwnServerLogs,
  serverLogs,
} from "./access-log-json.js";
import { CaddyApiError } from "./admin.js";
import type { CaddyConfig, ConfigKeys, Planned } from "./config.js";

type Json = Record<string, unknown>;

/**
 * `add`: what `want` holds is added to what Caddy holds, nothing is taken away (before routes that log are
 * written). `exact`: Caddy ends up holding `want` for the agent's parts (after routes stopped logging, and at
 * start).
 */
export type AccessLogMode = "add" | "exact";

/** What a bringing in line wrote: each part is one config change (one reload), made only when it differs. */
export interface AccessLogWrites {
  logging: boolean;
  server: boolean;
  /** The managed server does not exist yet: its host map could not be written. */
  serverMissing: boolean;
}

/**
 * The access logs' parts of Caddy's config (see access-log-json.ts): the agent's entries of `logging.logs` and
 * the `exclude` of the default log (never its writer, which prepareLogging owns), and the managed server's
 * `logs`. Each is a change of CaddyConfig: read, and written with If-Match of that read only when it differs.
 */
export class CaddyAccessLogs {
  private readonly serverLogs: ConfigKeys;

  constructor(
    private readonly config: CaddyConfig,
    server: string,
  ) {
    this.serverLogs = ["apps", "http", "servers", server, "logs"];
  }

  /** Brings the logs in line with `want` (see AccessLogMode): the logs first, so a mapped host has its file. */
  async bringInLine(want: AccessLogState, mode: AccessLogMode): Promise<AccessLogWrites> {
    const [logging, server] = await this.plan(want, mode);
    // A Caddy without any config has nowhere to put a route's log before the route creates the server.
    if (logging.missing && want.logs.size > 0)
      throw new CaddyApiError(400, "Caddy has no config to add the routes' access logs to");
    const wroteLogging = await this.config.apply(logging);
    const wroteServer = await this.config.apply(server);
    return {
      logging: wroteLogging.written,
      server: wroteServer.written,
      serverMissing: wroteServer.missing && want.hosts.size > 0,
    };
  }

  /** Whether Caddy holds something else than `want` for the agent's parts; reads only. */
  async differs(want: AccessLogState): Promise<boolean> {
    const planned = await this.plan(want, "exact");
    return planned.some((p) => p.write !== undefined);
  }

  /**
   * Both parts read together, each with the write that brings it in line. The server's `logs` needs the
   * managed server: while it does not exist there is no host to map (`missing`).
   */
  private plan(want: AccessLogState, mode: AccessLogMode): Promise<[Planned, Planned]> {
    return Promise.all([
      this.config.plan(["logging", "logs"], (current) => loggingLogs(current, want, mode)),
      this.config.plan(this.serverLogs, (current) => serverHostMap(current, want, mode), { needs: 4 }),
    ]);
  }
}

/** `logging.logs` (undefined: none) holding the routes' logs `want` names, in the given mode. */
function loggingLogs(current: unknown, want: AccessLogState, mode: AccessLogMode): unknown {
  const have = (current ?? {}) as Record<string, Json>;
  const next: Record<string, Json> = { ...have };
  if (mode === "exact")
    for (const key of Object.keys(next))
      if (key.startsWith(ACCESS_LOG_PREFIX) && !want.logs.has(key)) delete next[key];
  for (const [key, log] of want.logs) next[key] = log;
  if (want.logs.size > 0) next.default = withoutAccessEntries(next.default);
  return sameJson(next, have) ? current : next;
}

/** The managed server's `logs` (undefined: none) mapping the hosts `want` names, in the given mode. */
function serverHostMap(current: unknown, want: AccessLogState, mode: AccessLogMode): unknown {
  const ours = isOwnServerLogs(current ?? null);
  const hosts = new Set(want.hosts);
  if (mode === "add" && ours)
    for (const h of Object.keys(((current as Json).logger_names ?? {}) as Json)) hosts.add(h);
  // No route logs: a server without `logs` records no request at all. A `logs` the agent did not write
  // (an adopted Caddy's) stays while no route logs.
  if (hosts.size === 0) return !ours || mode === "add" ? current : undefined;
  return serverLogs(hosts);
}

/** The default log as it was, but taking no access entry: those go to the routes' files or nowhere. */
function withoutAccessEntries(log: Json | undefined): Json {
  const exclude = Array.isArray(log?.exclude) ? (log.exclude as string[]) : [];
  if (exclude.includes(ACCESS_LOGGER_NAMESPACE)) return log ?? {};
  return { ...log, exclude: [...exclude, ACCESS_LOGGER_NAMESPACE] };
}
