import { join } from "node:path";
import { parse, setting } from "../config.js";
import { projectRoot } from "../paths.js";

/** Where `scripts/fetch-caddy.sh` unpacks Caddy; the embedded default when no admin endpoint is configured. */
export const fetchedCaddyBinary = join(projectRoot(), ".cache/caddy/usr/bin/caddy");

/** See caddyMemoryLimitMb's doc and docs/performance.md for how it was chosen. */
export const CADDY_MEMORY_LIMIT_DEFAULT_MB = 768;

export type CaddyAdminAddress = { kind: "tcp"; url: URL } | { kind: "unix"; socketPath: string };

export function parseCaddyAdmin(raw: unknown): CaddyAdminAddress | undefined {
  const s = parse.optionalString(raw);
  if (s === undefined) return undefined;
  if (s.startsWith("unix:")) {
    const socketPath = s.slice("unix:".length).replace(/^\/\/(?=\/)/, "");
    if (!socketPath.startsWith("/")) throw new Error(`unix socket path must be absolute, got "${s}"`);
    return { kind: "unix", socketPath };
  }
  let url: URL;
  try {
    url = new URL(s);
  } catch {
    throw new Error(`expected http://host:port or unix:/path/to.sock, got "${s}"`);
  }
  if (url.protocol !== "http:" || !url.port || (url.pathname !== "/" && url.pathname !== ""))
    throw new Error(`expected http://host:port or unix:/path/to.sock, got "${s}"`);
  return { kind: "tcp", url };
}

/** The admin endpoint as the setting spells it: `unix:/path` or `http://host:port`. */
export const showCaddyAdmin = (a: CaddyAdminAddress): string =>
  a.kind === "unix" ? `unix:${a.socketPath}` : a.url.origin;

/** The settings of Caddy and of how the agent reaches and runs it. */
export const caddySettings = {
  caddyAdmin: setting({
    key: "caddyAdmin",
    env: "HOSTKEEPER_CADDY_ADMIN",
    area: "proxy",
    doc: "Caddy admin endpoint, `http://host:port` or `unix:/path/to.sock`. When set, the agent uses that Caddy and never starts one; when unset, it starts its own (admin on `<data dir>/caddy/admin.sock`, config persisted) and leaves it running across agent restarts.",
    defaultText: "embedded Caddy",
    default: undefined as CaddyAdminAddress | undefined,
    parse: parseCaddyAdmin,
    show: (a) => (a === undefined ? "" : showCaddyAdmin(a)),
  }),
  caddyServer: setting({
    key: "caddyServer",
    env: "HOSTKEEPER_CADDY_SERVER",
    area: "proxy",
    doc: "Name of the server under `apps.http.servers` whose routes the agent manages.",
    defaultText: "srv0",
    default: "srv0",
    parse: (raw) => {
      const s = parse.string({ nonEmpty: true })(raw);
      if (!/^[A-Za-z0-9_.-]+$/.test(s)) throw new Error(`"${s}" is not a usable server name`);
      return s;
    },
  }),
  caddyListen: setting({
    key: "caddyListen",
    env: "HOSTKEEPER_CADDY_LISTEN",
    area: "proxy",
    doc: "Comma-separated listen addresses of the managed server. Embedded Caddy: the server exists from the start on these, and one another process holds (even through SO_REUSEPORT) stops the start. With `HOSTKEEPER_CADDY_ADMIN`: used when the agent has to create the server. Those on `HOSTKEEPER_CADDY_HTTP_PORT` serve plain HTTP, the others TLS unless `HOSTKEEPER_TLS_ISSUER` is `off`.",
    defaultText: ":80,:443",
    default: [":80", ":443"],
    parse: (raw) => {
      const list = parse.list(raw);
      if (list.length === 0) throw new Error("needs at least one address");
      return list;
    },
  }),
  caddyBinary: setting({
    key: "caddyBinary",
    env: "HOSTKEEPER_CADDY_BINARY",
    area: "proxy",
    doc: "Caddy executable the agent starts when `HOSTKEEPER_CADDY_ADMIN` is unset.",
    defaultText: "`.cache/caddy/usr/bin/caddy` (from `scripts/fetch-caddy.sh`)",
    default: fetchedCaddyBinary,
    parse: parse.string({ nonEmpty: true }),
  }),
  caddyRestartBackoffMs: setting({
    key: "caddyRestartBackoffMs",
    env: "HOSTKEEPER_CADDY_RESTART_BACKOFF_MS",
    area: "proxy",
    doc: "Embedded Caddy: delay before it is started again after it exits; it doubles per exit in a row up to 64 times this, and starts over once Caddy has stayed up that long.",
    defaultText: "1000",
    default: 1000,
    parse: parse.int(10, 60_000),
  }),
  caddyLogRollSizeMb: setting({
    key: "caddyLogRollSizeMb",
    env: "HOSTKEEPER_CADDY_LOG_ROLL_SIZE_MB",
    area: "proxy",
    doc: "Embedded Caddy: its log, `<data dir>/caddy/caddy.log`, is rolled (renamed with a timestamp and gzipped) when it reaches this size in MiB.",
    defaultText: "10",
    default: 10,
    parse: parse.int(1, 10_000),
  }),
  caddyLogRollKeep: setting({
    key: "caddyLogRollKeep",
    env: "HOSTKEEPER_CADDY_LOG_ROLL_KEEP",
    area: "proxy",
    doc: "Embedded Caddy: how many rolled log files are kept beside `caddy.log`; older ones are deleted.",
    defaultText: "5",
    default: 5,
    parse: parse.int(1, 1000),
  }),
  caddyMemoryLimitMb: setting({
    key: "caddyMemoryLimitMb",
    env: "HOSTKEEPER_CADDY_MEMORY_LIMIT_MB",
    area: "proxy",
    doc: "Go's memory limit (`GOMEMLIMIT`) for Caddy, in MiB: the embedded Caddy gets it at its start, and `HOSTKEEPER_CADDY_ENV_FILE` carries it to a Caddy the agent does not start. Without a limit Go keeps what each config reload allocated (Caddy held its largest reload's memory for good); near the limit its collector gives it back, at the price of more collection work while a reload runs. Not a hard cap: Caddy may go past it rather than fail. 0: no limit. See Performance for the figures.",
    defaultText: String(CADDY_MEMORY_LIMIT_DEFAULT_MB),
    default: CADDY_MEMORY_LIMIT_DEFAULT_MB,
    parse: parse.int(0, 1_048_576),
  }),
  caddyEnvFile: setting({
    key: "caddyEnvFile",
    env: "HOSTKEEPER_CADDY_ENV_FILE",
    area: "proxy",
    doc: "A file the agent writes Caddy's environment to at its start (`GOMEMLIMIT` from `HOSTKEEPER_CADDY_MEMORY_LIMIT_MB`), for a Caddy it does not start: the packages' `hostkeeper-caddy.service` reads `/var/lib/hostkeeper/caddy.env` as its `EnvironmentFile`. Caddy takes a change at its next start. Unset: none is written.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw);
      if (s !== undefined && !s.startsWith("/")) throw new Error(`must be an absolute path, got "${s}"`);
      return s;
    },
  }),
  caddyTimeoutMs: setting({
    key: "caddyTimeoutMs",
    env: "HOSTKEEPER_CADDY_TIMEOUT_MS",
    area: "proxy",
    doc: "Time-out of one request to Caddy's admin API.",
    defaultText: "30000",
    default: 30_000,
    parse: parse.int(100, 600_000),
  }),
  caddyGracePeriodMs: setting({
    key: "caddyGracePeriodMs",
    env: "HOSTKEEPER_CADDY_GRACE_PERIOD_MS",
    area: "proxy",
    doc: "`grace_period` of Caddy's HTTP app (Caddy has it per app, not per server), set at the agent's start (with `HOSTKEEPER_CADDY_ADMIN` only when this is set) and when the agent creates the app: how long a replaced config's servers wait for active requests before they are forced to close. 0 leaves Caddy's default, an eternal grace period.",
    defaultText: "10000",
    default: 10_000,
    parse: parse.int(0, 86_400_000),
  }),
};
