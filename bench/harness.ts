/**
 * What the benchmarks share: bare Caddy instances (the agent drives one; raw admin-API calls and the
 * connection benchmarks use others), the agent started exactly as `npm start` starts it, plain loopback
 * requests, what Caddy's `/metrics` says, and the statistics and table rows the report prints.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import http from "node:http";
import { join } from "node:path";
import type { RouteJson } from "../src/caddy/routes/plan.js";
import { fetchedCaddyBinary } from "../src/caddy/settings.js";
import { projectRoot } from "../src/paths.js";
import { buildRoute } from "../src/proxy/route/build-route.js";
import { redirectRoute } from "../src/proxy/route/https-redirect.js";
import { freePort, httpRequest } from "../support/loopback.js";
import { metricSample } from "../support/prometheus.js";

export const TOKEN = "bench-token-0123456789abcdef";
export const UPSTREAM = "127.0.0.1:9";
export const routesPath = "/config/apps/http/servers/srv0/routes";

/**
 * BENCH_HTTPS_REDIRECT=1: both Caddys as a server serving TLS has them, without getting certificates: the
 * HTTP port is the listener's, automatic HTTPS on with `disable_certificates`, an internal catch-all policy,
 * and the agent's HTTPS redirect leading the routes (the raw side writes it too, as the same config).
 */
export const BENCH_REDIRECT = process.env.BENCH_HTTPS_REDIRECT === "1";

/** What both Caddys' routes start with: the HTTPS redirect under BENCH_HTTPS_REDIRECT, else nothing. */
export const leadingRoutes = (): RouteJson[] =>
  BENCH_REDIRECT ? [redirectRoute({ enabled: true, httpsPort: 443 }, [])] : [];
/**
 * How long after its last request the agent counts as idle: by then it has put away the routes it parsed
 * for the next change (10 s after its last read of them) and made its idle collection (5 s later).
 */
export const IDLE_MS = 20_000;

export type Res = Awaited<ReturnType<typeof httpRequest>>;

export const call = (
  port: number,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
) => httpRequest(port, method, path, { body, headers });

export const expect = (r: Res, status: number, what: string) => {
  if (r.status !== status)
    throw new Error(`${what}: expected ${status}, got ${r.status}: ${r.body.slice(0, 300)}`);
  return r;
};

/**
 * A route as the agent writes it, as a raw client would write it: to `dial`, with `stream_close_delay` when
 * given. `routeJson(id)` is the route the agent writes for `writeBody(id)`.
 */
export const routeJson = (id: string, dial = UPSTREAM, streamCloseDelay?: string) => ({
  "@id": id,
  match: [{ host: [id] }],
  handle: [
    {
      handler: "reverse_proxy",
      upstreams: [{ dial }],
      load_balancing: { selection_policy: { policy: "first" } },
      ...(streamCloseDelay ? { stream_close_delay: streamCloseDelay } : {}),
    },
  ],
  terminal: true,
});
export const writeBody = (id: string) => ({ domain: id, upstreams: [{ dial: UPSTREAM }] });

/** A real bcrypt hash (cost 10) of "bench", made with `caddy hash-password`. */
const BENCH_HASH = "$2a$10$mLYMPrGOQ3gcY9TIq4SD6OmFgaI.1ZLulA6eqLdOYWB2h8sbWY5Fu";

/** A write request with site policies, as a platform's customer site might carry them. */
export const policyBody = (id: string) => ({
  ...writeBody(id),
  redirect_from: [`www.${id}`],
  paths: [{ prefix: "/api", upstreams: [{ dial: UPSTREAM }], strip_prefix: true }],
  basic_auth: { users: [{ username: "bench", password_hash: BENCH_HASH }] },
  headers: {
    response: { set: { "Strict-Transport-Security": "max-age=31536000" }, delete: ["X-Powered-By"] },
  },
  encode: ["zstd", "gzip"] as ("zstd" | "gzip")[],
});

/** The benchmark's routes: every tenth (`i` a multiple of 10) carries site policies. */
export const benchBody = (id: string, i: number) => (i % 10 === 0 ? policyBody(id) : writeBody(id));

/** The route the agent writes for `benchBody(id, i)` (without `stream_close_delay`), for raw clients. */
export const benchRoute = (id: string, i: number) => buildRoute(benchBody(id, i)).route;

export async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

export const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] ?? Number.NaN;
};

export const rssMb = (pid: number) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : Number.NaN;
};

/** CPU time the process has used so far, all its threads, user and system (seconds; Linux's 100 ticks a second). */
export const cpuSeconds = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return (Number(fields[11]) + Number(fields[12])) / 100;
};

export const loadAverage = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

export async function waitHttp(port: number, path: string, child: ChildProcess) {
  const end = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${path}: process exited`);
    try {
      if ((await call(port, "GET", path)).status === 200) return;
    } catch {
      // not yet
    }
    if (Date.now() > end) throw new Error(`${path} did not come up`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A GET whose body is counted and dropped, for answers too large to keep per request (a soak's lists). */
export function drainGet(port: number, path: string, headers: Record<string, string>, agent?: http.Agent) {
  return new Promise<{ status: number; bytes: number }>((resolve, reject) => {
    const req = http.request(
      { host: "127.0.0.1", port, path, method: "GET", headers, agent: agent ?? false },
      (res) => {
        let bytes = 0;
        res.on("data", (c: Buffer) => {
          bytes += c.length;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, bytes }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end();
  });
}

export interface BenchCaddy {
  adminPort: number;
  httpPort: number;
  /** The HTTPS port (HTTP/2 over TLS, internal issuer), when asked for. */
  tlsPort: number | undefined;
  child: ChildProcess;
  stop(): void;
}

/**
 * A bare Caddy: admin on loopback TCP, nothing persisted, one empty server `srv0` on a loopback port, plus a
 * TLS port with Caddy's internal issuer for `tlsHost` when asked.
 */
export async function startCaddy(
  dir: string,
  name: string,
  opts: { tlsHost?: string; env?: Record<string, string> } = {},
): Promise<BenchCaddy> {
  const adminPort = await freePort();
  const httpPort = await freePort();
  const tlsPort = opts.tlsHost ? await freePort() : undefined;
  const home = join(dir, name);
  mkdirSync(home, { recursive: true });
  const srv0: Record<string, unknown> = {
    listen: [`127.0.0.1:${httpPort}`],
    automatic_https: { disable: true },
    routes: [],
  };
  const httpApp: Record<string, unknown> = { servers: { srv0 } };
  const apps: Record<string, unknown> = { http: httpApp };
  if (BENCH_REDIRECT && !opts.tlsHost) {
    srv0.automatic_https = { disable_certificates: true };
    srv0.routes = leadingRoutes();
    httpApp.http_port = httpPort;
    apps.tls = { automation: { policies: [{ issuers: [{ module: "internal" }] }] } };
    apps.pki = { certificate_authorities: { local: { install_trust: false } } };
  }
  if (opts.tlsHost && tlsPort) {
    // One server on both ports: Caddy serves TLS (HTTP/2) on every listener but the app's http_port.
    srv0.listen = [`127.0.0.1:${httpPort}`, `127.0.0.1:${tlsPort}`];
    srv0.tls_connection_policies = [{}];
    httpApp.http_port = httpPort;
    httpApp.https_port = tlsPort;
    apps.tls = {
      certificates: { automate: [opts.tlsHost] },
      automation: { policies: [{ subjects: [opts.tlsHost], issuers: [{ module: "internal" }] }] },
    };
    apps.pki = { certificate_authorities: { local: { install_trust: false } } };
  }
  const cfg = join(home, "config.json");
  writeFileSync(
    cfg,
    JSON.stringify({ admin: { listen: `127.0.0.1:${adminPort}`, config: { persist: false } }, apps }),
  );
  const child = spawn(fetchedCaddyBinary, ["run", "--config", cfg], {
    stdio: "ignore",
    env: {
      ...process.env,
      XDG_CONFIG_HOME: join(home, "cfg"),
      XDG_DATA_HOME: join(home, "data"),
      HOME: home,
      ...opts.env,
    },
  });
  const stop = () => {
    if (child.pid && child.exitCode === null) child.kill("SIGKILL");
  };
  await waitHttp(adminPort, "/config/", child).catch((err: unknown) => {
    stop();
    throw err;
  });
  return { adminPort, httpPort, tlsPort, child, stop };
}

/**
 * A request to Caddy's admin API, retried on a connection error: Caddy restarts its admin server after
 * every config change, so the request after one can meet a reset. Only for idempotent requests.
 */
export async function admin(c: BenchCaddy, method: string, path: string, body?: unknown): Promise<Res> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await httpRequest(c.adminPort, method, path, { body });
    } catch (err) {
      if (attempt >= 5) throw err;
      await new Promise((r) => setTimeout(r, 50 * 2 ** attempt));
    }
  }
}

/** A metric from Caddy's admin `/metrics`. */
export async function caddyMetric(c: BenchCaddy, name: string, labels: Record<string, string> = {}) {
  return metricSample((await admin(c, "GET", "/metrics")).body, name, labels);
}

/** Config writes Caddy's admin API has answered (each one that changes the config is a reload). */
export async function adminWrites(c: BenchCaddy): Promise<number> {
  let n = 0;
  for (const method of ["POST", "PUT", "PATCH", "DELETE"]) {
    const v = await caddyMetric(c, "caddy_admin_http_requests_total", { method });
    if (!Number.isNaN(v)) n += v;
  }
  return n;
}

export interface CaddyMemory {
  /** Time of Caddy's last successful config load (seconds, fractional): a new value means a reload. */
  lastReload: number;
  heapInuseMb: number;
  rssMb: number;
  goroutines: number;
}

export async function caddyMemory(c: BenchCaddy): Promise<CaddyMemory> {
  const text = (await admin(c, "GET", "/metrics")).body;
  return {
    lastReload: metricSample(text, "caddy_config_last_reload_success_timestamp_seconds"),
    heapInuseMb: metricSample(text, "go_memstats_heap_inuse_bytes") / 2 ** 20,
    rssMb: rssMb(c.child.pid as number),
    goroutines: metricSample(text, "go_goroutines"),
  };
}

export interface BenchAgent {
  port: number;
  child: ChildProcess;
  call: (method: string, path: string, body?: unknown) => Promise<Res>;
  auth: Record<string, string>;
  stop(): void;
  /**
   * Stops the agent as its service manager does (SIGTERM), so that what it writes on its way out (a CPU
   * profile of `BENCH_AGENT_NODE_OPTIONS=--cpu-prof`) is written; SIGKILL when it has not exited in 15 s.
   */
  end(): Promise<void>;
}

/**
 * The agent of the checkout at `root` (this one by default; another to compare versions) exactly as its
 * `npm start` runs it (scripts/start, the pinned Node, the same flags), on `caddy`, once it is ready.
 * `BENCH_AGENT_NODE_OPTIONS` becomes its NODE_OPTIONS (`--cpu-prof --cpu-prof-dir=<dir>` profiles it; stop
 * it with `end` then), and its PID is printed so each profile can be told from the others.
 */
export async function startAgent(
  dir: string,
  caddy: Pick<BenchCaddy, "adminPort" | "httpPort">,
  opts: { root?: string; env?: Record<string, string>; readyPath?: string } = {},
): Promise<BenchAgent> {
  const root = opts.root ?? projectRoot();
  const port = await freePort();
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
    scripts: { start: string };
  };
  const child = spawn("sh", ["-c", `exec ${pkg.scripts.start}`], {
    cwd: root,
    stdio: ["ignore", "ignore", "inherit"],
    env: {
      PATH: process.env.PATH,
      HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
      HOSTKEEPER_DATA_DIR: join(dir, "agent"),
      HOSTKEEPER_TOKEN: TOKEN,
      HOSTKEEPER_CADDY_ADMIN: `http://127.0.0.1:${caddy.adminPort}`,
      HOSTKEEPER_LOG_LEVEL: "warn",
      // The bench Caddy's server serves plain HTTP with automatic HTTPS off, as the raw side's does: with
      // the default issuer (acme) the agent would turn it on, and Caddy would try to get certificates for
      // every one of the routes' hosts.
      HOSTKEEPER_TLS_ISSUER: "off",
      ...(BENCH_REDIRECT
        ? { HOSTKEEPER_TLS_ISSUER: "internal", HOSTKEEPER_CADDY_HTTP_PORT: String(caddy.httpPort) }
        : {}),
      ...(process.env.BENCH_AGENT_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_AGENT_NODE_OPTIONS } : {}),
      ...opts.env,
    },
  });
  if (process.env.BENCH_AGENT_NODE_OPTIONS) console.error(`agent of ${root}: pid ${child.pid}`);
  const stop = () => {
    if (child.pid && child.exitCode === null) child.kill("SIGKILL");
  };
  const end = async () => {
    if (!child.pid || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000).unref())]);
    stop();
  };
  await waitHttp(port, opts.readyPath ?? "/readyz", child).catch((err: unknown) => {
    stop();
    throw err;
  });
  const auth = { authorization: `Bearer ${TOKEN}` };
  return { port, child, auth, stop, end, call: (method, path, body) => call(port, method, path, body, auth) };
}

export interface Row {
  name: string;
  routes: number;
  agent: { median: number; p95: number };
  raw: { median: number; p95: number };
  ratio: number;
  target: string;
  met: boolean;
}

/** A table row from agent and raw samples: a ratio of medians against the target. */
export function row(
  name: string,
  routes: number,
  a: number[],
  r: number[],
  target: number,
  higherIsBetter = false,
): Row {
  const am = quantile(a, 0.5);
  const rm = quantile(r, 0.5);
  const ratio = higherIsBetter ? rm / am : am / rm;
  return {
    name,
    routes,
    agent: { median: am, p95: quantile(a, 0.95) },
    raw: { median: rm, p95: quantile(r, 0.95) },
    ratio,
    target: higherIsBetter ? `>= ${target}x faster` : `<= ${target}`,
    met: higherIsBetter ? ratio >= target : ratio <= target,
  };
}

export const fmt = (n: number) => (n >= 100 ? n.toFixed(0) : n.toFixed(1));

export function table(rows: Row[]): string[] {
  return [
    "| operation | routes | agent median ms | agent p95 ms | raw median ms | raw p95 ms | ratio | target | met |",
    "|---|---|---|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.name} | ${r.routes} | ${fmt(r.agent.median)} | ${fmt(r.agent.p95)} | ${fmt(r.raw.median)} | ${fmt(r.raw.p95)} | ${r.ratio.toFixed(2)} | ${r.target} | ${r.met ? "yes" : "NO"} |`,
    ),
  ];
}
