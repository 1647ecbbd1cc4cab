import { type CaddyAdmin, CaddyApiError, caddyErrorText } from "../caddy/admin.js";
import { canonicalJson } from "../util/canonical-json.js";
import {
  ACCESS_LOG_PREFIX,
  ACCESS_LOGGER_NAMESPACE,
  type AccessLogState,
  isOwnServerLogs,
  serverLogs,
} from "./access-logs.js";

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
 * The access logs' parts of Caddy's config (see access-logs.ts): the agent's entries of `logging.logs` and
 * the `exclude` of the default log (never its writer, which prepareLogging owns), and the managed server's
 * `logs`. Each is read, and written with If-Match from that read only when it differs.
 */
export class CaddyAccessLogs {
  private readonly serverLogsPath: string;

  constructor(
    private readonly admin: CaddyAdmin,
    server: string,
  ) {
    this.serverLogsPath = `/config/apps/http/servers/${server}/logs`;
  }

  /** Brings the logs in line with `want` (see AccessLogMode): the logs first, so a mapped host has its file. */
  async bringInLine(want: AccessLogState, mode: AccessLogMode): Promise<AccessLogWrites> {
    const logging = await this.conformLogging(want, mode);
    const server = await this.conformServer(want, mode);
    return { logging, server: server === "written", serverMissing: server === "missing" };
  }

  private async conformLogging(want: AccessLogState, mode: AccessLogMode): Promise<boolean> {
    const res = await this.admin.read("/config/logging");
    if (res.status !== 200) throw new CaddyApiError(res.status, caddyErrorText(res));
    const logging = JSON.parse(res.text) as Json | null;
    const current = (logging?.logs ?? {}) as Record<string, Json>;
    const next: Record<string, Json> = { ...current };
    if (mode === "exact")
      for (const key of Object.keys(next))
        if (key.startsWith(ACCESS_LOG_PREFIX) && !want.logs.has(key)) delete next[key];
    for (const [key, log] of want.logs) next[key] = log;
    if (want.logs.size > 0) next.default = withoutAccessEntries(next.default);
    if (canonicalJson(next) === canonicalJson(current)) return false;
    if (logging === null) await this.admin.write("POST", "/config/logging", { logs: next }, res.etag);
    else await this.admin.write("POST", "/config/logging/logs", next, res.etag);
    return true;
  }

  private async conformServer(
    want: AccessLogState,
    mode: AccessLogMode,
  ): Promise<"written" | "unchanged" | "missing"> {
    const res = await this.admin.read(this.serverLogsPath);
    // A missing server reads as 400 (its parent is missing): there is no host to map yet.
    if (res.status === 400 || res.status === 404) return want.hosts.size === 0 ? "unchanged" : "missing";
    if (res.status !== 200) throw new CaddyApiError(res.status, caddyErrorText(res));
    const current = JSON.parse(res.text) as Json | null;
    const ours = isOwnServerLogs(current);
    const hosts = new Set(want.hosts);
    if (mode === "add" && ours)
      for (const h of Object.keys((current?.logger_names ?? {}) as Json)) hosts.add(h);
    if (hosts.size === 0) {
      // No route logs: a server without `logs` records no request at all. A `logs` the agent did not
      // write (an adopted Caddy's) stays while no route logs.
      if (!ours || mode === "add") return "unchanged";
      await this.admin.write("DELETE", this.serverLogsPath, undefined, res.etag);
      return "written";
    }
    const next = serverLogs(hosts);
    if (canonicalJson(next) === canonicalJson(current)) return "unchanged";
    await this.admin.write("POST", this.serverLogsPath, next, res.etag);
    return "written";
  }
}

/** The default log as it was, but taking no access entry: those go to the routes' files or nowhere. */
function withoutAccessEntries(log: Json | undefined): Json {
  const exclude = Array.isArray(log?.exclude) ? (log.exclude as string[]) : [];
  if (exclude.includes(ACCESS_LOGGER_NAMESPACE)) return log ?? {};
  return { ...log, exclude: [...exclude, ACCESS_LOGGER_NAMESPACE] };
}
