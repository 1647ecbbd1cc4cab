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
    const p = await this.plan(want, mode);
    for (const w of [p.logging, p.server]) if (w) await this.admin.write(w.method, w.path, w.value, w.etag);
    return {
      logging: p.logging !== undefined,
      server: p.server !== undefined,
      serverMissing: p.serverMissing,
    };
  }

  /** Whether Caddy holds something else than `want` for the agent's parts; reads only. */
  async differs(want: AccessLogState): Promise<boolean> {
    const p = await this.plan(want, "exact");
    return p.logging !== undefined || p.server !== undefined;
  }

  /** The writes that bring each part in line, from one read of each (their ETags go with them). */
  private async plan(want: AccessLogState, mode: AccessLogMode) {
    const [logging, server] = await Promise.all([this.planLogging(want, mode), this.planServer(want, mode)]);
    return {
      logging,
      server: server === "missing" ? undefined : server,
      serverMissing: server === "missing",
    };
  }

  private async planLogging(want: AccessLogState, mode: AccessLogMode): Promise<Write | undefined> {
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
    if (canonicalJson(next) === canonicalJson(current)) return undefined;
    // POST sets an object's key whether or not it is there; If-Match (of /config/logging) keeps it off a
    // concurrent change.
    return logging === null
      ? { method: "POST", path: "/config/logging", value: { logs: next }, etag: res.etag }
      : { method: "POST", path: "/config/logging/logs", value: next, etag: res.etag };
  }

  private async planServer(
    want: AccessLogState,
    mode: AccessLogMode,
  ): Promise<Write | "missing" | undefined> {
    const res = await this.admin.read(this.serverLogsPath);
    // A missing server reads as 400 (its parent is missing): there is no host to map yet.
    if (res.status === 400 || res.status === 404) return want.hosts.size === 0 ? undefined : "missing";
    if (res.status !== 200) throw new CaddyApiError(res.status, caddyErrorText(res));
    const current = JSON.parse(res.text) as Json | null;
    const ours = isOwnServerLogs(current);
    const hosts = new Set(want.hosts);
    if (mode === "add" && ours)
      for (const h of Object.keys((current?.logger_names ?? {}) as Json)) hosts.add(h);
    const path = this.serverLogsPath;
    if (hosts.size === 0) {
      // No route logs: a server without `logs` records no request at all. A `logs` the agent did not
      // write (an adopted Caddy's) stays while no route logs.
      if (!ours || mode === "add") return undefined;
      return { method: "DELETE", path, value: undefined, etag: res.etag };
    }
    const next = serverLogs(hosts);
    if (canonicalJson(next) === canonicalJson(current)) return undefined;
    return { method: "POST", path, value: next, etag: res.etag };
  }
}

/** One write of a part, with the ETag of the read it was planned from. */
interface Write {
  method: "POST" | "DELETE";
  path: string;
  value: unknown;
  etag: string | undefined;
}

/** The default log as it was, but taking no access entry: those go to the routes' files or nowhere. */
function withoutAccessEntries(log: Json | undefined): Json {
  const exclude = Array.isArray(log?.exclude) ? (log.exclude as string[]) : [];
  if (exclude.includes(ACCESS_LOGGER_NAMESPACE)) return log ?? {};
  return { ...log, exclude: [...exclude, ACCESS_LOGGER_NAMESPACE] };
}
