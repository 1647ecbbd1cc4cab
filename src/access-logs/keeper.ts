import type { Logger } from "pino";
import { CaddyAccessLogs } from "../caddy/access-log-config.js";
import { type AccessLogFiles, accessLogState, loggingOf, loggingRoutesOf } from "../caddy/access-log-json.js";
import type { CaddyAdmin } from "../caddy/admin.js";
import { CaddyConfig, type ConfigKeys } from "../caddy/config.js";
import type { Op, RouteJson } from "../caddy/routes/plan.js";
import type { BatchHooks } from "../proxy/writer.js";

/**
 * Keeps Caddy's access log config (the logs, the server's host map, the default log's exclude) in line with
 * the routes that log, as the writer's hooks. Before a batch that writes routes that log, their logs and
 * hosts are added (each part one config change, only when it differs), so such a route writes its file
 * from its first request. Once no change is queued after a batch that stopped a route's logging (a delete,
 * a replace without `access_log` or with other hosts), everything is brought in line with the routes Caddy
 * holds: a burst of changes pays for that once. Routes that do not log cost nothing.
 */
export class AccessLogKeeper implements BatchHooks {
  private readonly config: CaddyConfig;
  private readonly caddy: CaddyAccessLogs;
  private readonly routes: ConfigKeys;
  private logging: Set<string> | undefined;

  constructor(
    admin: CaddyAdmin,
    server: string,
    /** Where and how Caddy writes the files; undefined when the agent has no folder for them. */
    private readonly files: AccessLogFiles | undefined,
    private readonly log: Logger,
  ) {
    this.config = new CaddyConfig(admin);
    this.caddy = new CaddyAccessLogs(this.config, server);
    this.routes = ["apps", "http", "servers", server, "routes"];
  }

  needs(op: Op): boolean {
    return op.kind !== "delete" && loggingOf(op.route) !== undefined;
  }

  async before(ops: readonly Op[]): Promise<boolean> {
    const files = this.files;
    const routes = ops.flatMap((op) => (op.kind === "delete" ? [] : [loggingOf(op.route)]));
    const logging = routes.filter((r) => r !== undefined);
    if (logging.length === 0) return false;
    if (files === undefined) throw new Error("the agent has no folder for access logs");
    const wrote = await this.caddy.bringInLine(accessLogState(logging, files), "add");
    // What was added for a change that then did not apply is taken away by the follow-up.
    return wrote.logging || wrote.server || wrote.serverMissing;
  }

  after(changes: readonly { op: Op; previous: RouteJson | null }[]): boolean {
    return changes.some((c) => loggingOf(c.previous) !== undefined);
  }

  async idle(): Promise<void> {
    this.logging = undefined;
    const routes = loggingRoutesOf(await this.routesText());
    this.logging = new Set(routes.map((r) => r.id));
    // Without a folder no route can have been given a log by this agent; one that has (written by an agent
    // configured otherwise) keeps what Caddy holds for it.
    const files = this.files;
    if (files === undefined) return;
    const wrote = await this.caddy.bringInLine(accessLogState(routes, files), "exact");
    if (wrote.logging || wrote.server)
      this.log.info(
        { logging_routes: routes.length, logs_changed: wrote.logging, host_map_changed: wrote.server },
        "brought Caddy's access logs in line with the routes",
      );
  }

  /**
   * Whether Caddy's access log config is in line with the routes, and the ids of the routes that log: read
   * without holding the writer, so a slow or hung Caddy holds up no route change (a Caddy in line, every
   * start but the first, costs these reads and nothing more).
   */
  async look(): Promise<{ inLine: boolean; logging: ReadonlySet<string> }> {
    const routes = loggingRoutesOf(await this.routesText());
    const logging = new Set(routes.map((r) => r.id));
    const files = this.files;
    if (files === undefined) return { inLine: true, logging };
    return { inLine: !(await this.caddy.differs(accessLogState(routes, files))), logging };
  }

  /**
   * The ids of the routes that logged when `idle` last read them; undefined when that read failed. Read
   * right after `idle` in the same turn of the writer, it is what Caddy holds (the routes are read once).
   */
  loggingIds(): ReadonlySet<string> | undefined {
    return this.logging;
  }

  /** Caddy's text of the managed server's routes; a server not there yet has none. */
  private async routesText(): Promise<string> {
    return (await this.config.text(this.routes)) ?? "[]";
  }
}
