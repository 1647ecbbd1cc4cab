import type { Logger } from "pino";
import { type AccessLogFiles, accessLogFile, loggingOf } from "../caddy/access-log-json.js";
import type { RouteService } from "../proxy/service.js";
import type { RouteWriter } from "../proxy/writer.js";
import { Periodic } from "../util/periodic.js";
import { UnsafePathError } from "../util/shared-folder.js";
import { AccessLogNotFoundError } from "./errors.js";
import { removeStaleFiles, staleFiles, type Tail, tailAcrossRolls } from "./files.js";
import type { AccessLogKeeper } from "./keeper.js";

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
  private readonly sweeps: Periodic;
  private first: Promise<void> = Promise.resolve();

  constructor(private readonly o: AccessLogServiceOptions) {
    this.sweeps = new Periodic({
      intervalMs: o.sweepMs ?? 3_600_000,
      round: () => this.sweep(),
      what: "looking after the access logs",
      log: o.log,
    });
  }

  /**
   * The newest `n` entries of the route's log, oldest first, each a JSON line Caddy wrote (checked, kept as
   * text: the answer is those lines in an array), from the current file and, when it holds fewer, the files
   * Caddy rolled from it, within TAIL_MAX_BYTES of lines; `cut` when older
   * entries asked for were left out for that limit. A file that fails SharedFolder's checks (a link, a
   * FIFO, another user's) is refused with UnsafePathError and a warning in the log.
   */
  async tail(routeId: string, n: number): Promise<{ entries: string[]; cut: boolean }> {
    const route = await this.o.routes.get(routeId);
    const files = this.o.files;
    if (loggingOf(route) === undefined || files === undefined)
      throw new AccessLogNotFoundError(
        `route ${routeId} has no access log (it is written without access_log: true)`,
      );
    let tail: Tail;
    try {
      tail = await tailAcrossRolls(accessLogFile(files.dir, routeId), n);
    } catch (err) {
      if (err instanceof UnsafePathError)
        this.o.log.warn({ route_id: routeId, path: err.path, reason: err.reason }, `refused ${err.message}`);
      throw err;
    }
    return { entries: tail.lines.filter(isJsonObject), cut: tail.cut };
  }

  /** Sweeps now (see `sweep`), then hourly. */
  start(): void {
    this.sweeps.start();
    this.first = this.sweeps.runNow();
  }

  /** Resolves once the start's sweep has ended, however it ended. */
  whenStarted(): Promise<void> {
    return this.first;
  }

  /**
   * Starts no sweep again. A sweep under way is not waited for: it touches no database, and its work inside
   * the writer is what the writer's own wait at close covers; its reads may hang on Caddy for a whole time-out.
   */
  close(): void {
    void this.sweeps.stop();
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
      const found = files && staleFiles(files.dir, look.logging, this.o.keepDays);
      if (found?.refused.length)
        this.o.log.warn(
          { files: found.refused, dir: files?.dir },
          "left alone entries of the access log folder named like logs that are not regular files of its owner (links, folders, FIFOs, another user's files)",
        );
      const stale = found?.stale;
      if (look.inLine && !stale?.length) return;
      await this.o.writer.followUp(async () => {
        const logging = this.o.keeper.loggingIds();
        if (files === undefined || logging === undefined || !stale?.length) return;
        const removed = removeStaleFiles(files.dir, logging, this.o.keepDays);
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

/** Whether `line` is a JSON object: a line cut short (a crash mid-write) is not an entry. */
function isJsonObject(line: string): boolean {
  try {
    const v: unknown = JSON.parse(line);
    return typeof v === "object" && v !== null && !Array.isArray(v);
  } catch {
    return false;
  }
}
