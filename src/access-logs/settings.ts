import { isAbsolute } from "node:path";
import { parse, setting } from "../config.js";

/** The per-route access logs' settings (docs/api/proxy-routes.md, Access logs). */
export const accessLogSettings = {
  accessLogDir: setting({
    key: "accessLogDir",
    env: "HOSTKEEPER_ACCESS_LOG_DIR",
    area: "proxy",
    doc: "Folder Caddy writes the routes' access logs to (`<route id>.log`, rolled beside it), which Caddy must be able to create and write and the agent to read. The packaged agent sets it to `/var/lib/hostkeeper-caddy/access-logs`, under the packaged Caddy's state folder. With `HOSTKEEPER_CADDY_ADMIN` and no folder, a route cannot get `access_log: true`.",
    defaultText: "`<data dir>/caddy/access-logs` with the embedded Caddy; none with `HOSTKEEPER_CADDY_ADMIN`",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw);
      if (s !== undefined && !isAbsolute(s)) throw new Error(`must be an absolute path, got "${s}"`);
      return s;
    },
  }),
  accessLogRollMb: setting({
    key: "accessLogRollMb",
    env: "HOSTKEEPER_ACCESS_LOG_ROLL_MB",
    area: "proxy",
    doc: "A route's access log is rolled by Caddy (renamed with a timestamp and gzipped) when it reaches this size in MiB.",
    defaultText: "100",
    default: 100,
    parse: parse.int(1, 10_000),
  }),
  accessLogKeep: setting({
    key: "accessLogKeep",
    env: "HOSTKEEPER_ACCESS_LOG_KEEP",
    area: "proxy",
    doc: "How many rolled files Caddy keeps beside a route's access log; older ones are deleted.",
    defaultText: "10",
    default: 10,
    parse: parse.int(1, 1000),
  }),
  accessLogKeepDays: setting({
    key: "accessLogKeepDays",
    env: "HOSTKEEPER_ACCESS_LOG_KEEP_DAYS",
    area: "proxy",
    doc: "Days the access log files of a deleted route (or one written again without `access_log`) are kept after their last write; then the agent removes them, rolled ones included (looked at on start and hourly). Caddy rolls only a file it still writes.",
    defaultText: "7",
    default: 7,
    parse: parse.int(0, 3650),
  }),
};
