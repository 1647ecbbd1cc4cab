import { join } from "node:path";
import { parse, setting } from "../config.js";
import { projectRoot } from "../paths.js";
import { parseCidrs } from "../util/cidrs.js";
import { normalizeDomain } from "./domain.js";
import { issuanceSettings } from "./issuance-settings.js";

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

export const proxySettings = {
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
  caddyStreamCloseDelayMs: setting({
    key: "caddyStreamCloseDelayMs",
    env: "HOSTKEEPER_CADDY_STREAM_CLOSE_DELAY_MS",
    area: "proxy",
    doc: "`stream_close_delay` of every `reverse_proxy` handler in the managed server's routes (the operator's too; existing routes get it at the agent's start). A websocket or other upgraded stream is kept open this long after a config reload instead of being closed by it; then it is closed, whichever route changed (see Streams and connections). Each reload while streams are open keeps the replaced config in Caddy's memory for this long. 0: streams close at every reload.",
    defaultText: "120000",
    default: 120_000,
    parse: parse.int(0, 86_400_000),
  }),
  routeGatherMaxMs: setting({
    key: "routeGatherMaxMs",
    env: "HOSTKEEPER_ROUTE_GATHER_MAX_MS",
    area: "proxy",
    doc: "Longest time a route change that finds the writer idle waits for other changes to go to Caddy with it (one reload for a burst instead of two). It waits at most 10% of what the last write to Caddy took, and ends 10 ms (or a quarter of that bound) after the last change that joined it: nothing at a couple of hundred routes, up to about 140 ms at 20,000 for a burst, 10 ms for a change alone. 0: a change goes at once.",
    defaultText: "250",
    default: 250,
    parse: parse.int(0, 1000),
  }),
  caddyGracePeriodMs: setting({
    key: "caddyGracePeriodMs",
    env: "HOSTKEEPER_CADDY_GRACE_PERIOD_MS",
    area: "proxy",
    doc: "`grace_period` of Caddy's HTTP app (Caddy has it per app, not per server), set at the agent's start and when the agent creates the app: how long a replaced config's servers wait for active requests before they are forced to close. 0 leaves Caddy's default, an eternal grace period.",
    defaultText: "10000",
    default: 10_000,
    parse: parse.int(0, 86_400_000),
  }),
  operatorDomain: setting({
    key: "operatorDomain",
    env: "HOSTKEEPER_OPERATOR_DOMAIN",
    area: "proxy",
    doc: "The operator's own domain. Its route is managed by the agent alone; the API answers 403 to changes of it and 409 to creating it.",
    defaultText: "none",
    default: undefined as string | undefined,
    // Held as its route id, so a domain that can be no route fails with the other settings, before the start.
    parse: (raw) => {
      const s = parse.optionalString(raw);
      if (s === undefined) return undefined;
      const id = normalizeDomain(s);
      if (!id.ok) throw new Error(id.message);
      return id.domain;
    },
  }),
  upstreamDenyCidrs: setting({
    key: "upstreamDenyCidrs",
    env: "HOSTKEEPER_UPSTREAM_DENY_CIDRS",
    area: "proxy",
    doc: "Comma-separated address ranges no route's upstream may reach: a `dial` at such an address, or with a host name that resolves to one when the route is written, is refused (400). Loopback and private ranges stay allowed, since applications listen there. The agent's own API, Caddy's admin endpoint and the operator's instance ports are refused whatever this holds.",
    defaultText: "169.254.0.0/16,fe80::/10,fd00:ec2::254/128",
    default: ["169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"],
    parse: (raw) => parseCidrs(parse.list(raw)),
  }),
  ...issuanceSettings,
};
