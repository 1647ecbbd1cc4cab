import type { Logger } from "pino";
import { lastLines, removeStaleFiles, staleFiles } from "./access-log-files.js";
import type { AccessLogKeeper } from "./access-log-keeper.js";
import { type AccessLogFiles, accessLogFile, loggingOf } from "./access-logs.js";
import { AccessLogNotFoundError } from "./errors.js";
import type { RouteService } from "./service.js";
import type { RouteWriter } from "./writer.js";

export interface AccessLogServiceOptions {
  routes: RouteService;
  writer: Pick<RouteWriter, "followUp">;
  keeper: AccessLogKeeper;
  /** Where Caddy writes the files; undefined when the agent has none (an external Caddy without the setting). */
  files: AccessLogFiles | undefined;
  /** Days a file of a route that no longer logs is kept after its last write. */
  keepDays: number;
  log: Logger;
  /** How often stale files are looked for and Caddy's access log config brought in line; default hourly. */
  sweepMs?: number;
}

/**
 * The access logs' own work besides the route changes: reading a route's newest lines, and, at start and
 * then hourly, bringing Caddy's access log config in line with the routes (a Caddy restarted or adopted)
 * and removing the files of routes that no longer log once they are `keepDays` old.
 */
export class AccessLogService {
  private timer: NodeJS.Timeout | undefined;
  private first: Promise<void> = Promise.resolve();

  constructor(private readonly o: AccessLogServiceOptions) {}

  /** The newest `n` entries of the route's log, oldest first: each a JSON line Caddy wrote, parsed. */
  async tail(routeId: string, n: number): Promise<unknown[]> {
    const route = await this.o.routes.get(routeId);
    const files = this.o.files;
    if (loggingOf(route) === undefined || files === undefined)
      throw new AccessLogNotFoundError(
        `route ${routeId} has no access log (it is written without access_log: true)`,
      );
    const lines = await lastLines(accessLogFile(files.dir, routeId), n);
    const entries: unknown[] = [];
    for (const line of lines) {
      try {
        entries.push(JSON.parse(line));
      } catch {
        // A line cut short (a crash mid-write): not an entry.
      }
    }
    return entries;
  }

  /** Sweeps now (see `sweep`), then hourly. */
  start(): void {
    this.first = this.sweep();
    this.timer = setInterval(() => void this.sweep(), this.o.sweepMs ?? 3_600_000);
    this.timer.unref();
  }

  /** Resolves once the start's sweep has ended, however it ended. */
  whenStarted(): Promise<void> {
    return this.first;
  }

  /**
   * Stops the timer. A sweep under way is not waited for: it touches no database, and its work inside the
   * writer is what the writer's own wait at close covers; its reads may hang on Caddy for a whole time-out.
   */
  close(): void {
    clearInterval(this.timer);
  }

  /**
   * One sweep: Caddy's access log config brought in line with the routes, and the stale files removed. Both
   * are looked at first without holding the writer (a slow or hung Caddy holds up no route change); each
   * is done only when needed, with the routes to itself: the removal reads the routes again there, so a
   * route created meanwhile, which opens its old file again (whose time is its last write's), keeps it.
   * Never throws.
   */
  async sweep(): Promise<void> {
    const files = this.o.files;
    try {
      const look = await this.o.keeper.look();
      const stale = files && (await staleFiles(files.dir, look.logging, this.o.keepDays));
      if (look.inLine && !stale?.length) return;
      await this.o.writer.followUp(async () => {
        const logging = this.o.keeper.loggingIds();
        if (files === undefined || logging === undefined || !stale?.length) return;
        const removed = await removeStaleFiles(files.dir, logging, this.o.keepDays);
        if (removed.length > 0)
          this.o.log.info(
            { files: removed, dir: files.dir },
            "removed the access log files of routes that no longer log",
          );
      });
    } catch (err) {
      this.o.log.warn({ err }, "could not look after the access logs");
    }
  }
}
