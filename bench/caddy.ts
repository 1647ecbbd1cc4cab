/**
 * A bare Caddy for the connection benchmarks (keep-alive, streams): admin on loopback TCP, nothing persisted,
 * one server `srv0` on a loopback port (plus a TLS port with Caddy's internal issuer when asked), and what
 * its admin `/metrics` says about reloads and memory.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fetchedCaddyBinary } from "../src/proxy/settings.js";
import { freePort, httpRequest } from "../support/loopback.js";
import { metricSample } from "../support/prometheus.js";

export interface BenchCaddy {
  adminPort: number;
  httpPort: number;
  /** The HTTPS port (HTTP/2 over TLS, internal issuer), when asked for. */
  tlsPort: number | undefined;
  child: ChildProcess;
  stop(): void;
}

export const routesPath = "/config/apps/http/servers/srv0/routes";

export async function startBenchCaddy(
  dir: string,
  name: string,
  opts: { tlsHost?: string } = {},
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
  const http: Record<string, unknown> = { servers: { srv0 } };
  const apps: Record<string, unknown> = { http };
  if (opts.tlsHost && tlsPort) {
    // One server on both ports: Caddy serves TLS (HTTP/2) on every listener but the app's http_port.
    srv0.listen = [`127.0.0.1:${httpPort}`, `127.0.0.1:${tlsPort}`];
    srv0.tls_connection_policies = [{}];
    http.http_port = httpPort;
    http.https_port = tlsPort;
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
    },
  });
  const end = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`caddy ${name} exited with ${child.exitCode}`);
    const up = await httpRequest(adminPort, "GET", "/config/").then(
      (r) => r.status === 200,
      () => false,
    );
    if (up) break;
    if (Date.now() > end) throw new Error(`caddy ${name} did not come up`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    adminPort,
    httpPort,
    tlsPort,
    child,
    stop: () => {
      if (child.pid && child.exitCode === null) process.kill(child.pid, "SIGKILL");
    },
  };
}

/**
 * A request to Caddy's admin API, retried on a connection error: Caddy restarts its admin server after
 * every config change, so the request after one can meet a reset. Only for idempotent requests.
 */
export async function admin(
  c: BenchCaddy,
  method: string,
  path: string,
  body?: unknown,
): Promise<Awaited<ReturnType<typeof httpRequest>>> {
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

export interface CaddyMemory {
  /** Time of Caddy's last successful config load (seconds, fractional): a new value means a reload. */
  lastReload: number;
  heapInuseMb: number;
  rssMb: number;
  goroutines: number;
}

export async function caddyMemory(c: BenchCaddy): Promise<CaddyMemory> {
  const text = (await admin(c, "GET", "/metrics")).body;
  const status = readFileSync(`/proc/${c.child.pid}/status`, "utf8");
  const rss = /VmRSS:\s+(\d+) kB/.exec(status);
  return {
    lastReload: metricSample(text, "caddy_config_last_reload_success_timestamp_seconds"),
    heapInuseMb: metricSample(text, "go_memstats_heap_inuse_bytes") / 2 ** 20,
    rssMb: rss ? Number(rss[1]) / 1024 : Number.NaN,
    goroutines: metricSample(text, "go_goroutines"),
  };
}

/** A managed-style route to `dial`, with `stream_close_delay` when given. */
export const benchRoute = (id: string, dial: string, streamCloseDelay?: string) => ({
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

export const BENCH_TOKEN = "bench-token-0123456789abcdef";

/**
 * The agent of the checkout at `root`, run as `npm start` runs it, on `c`'s admin API; `call` is an
 * authenticated request to its API.
 */
export async function startBenchAgent(dir: string, c: BenchCaddy, root: string) {
  const port = await freePort();
  const child = spawn(join(root, "scripts/start"), [], {
    cwd: root,
    stdio: ["ignore", "ignore", "inherit"],
    env: {
      PATH: process.env.PATH,
      HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
      HOSTKEEPER_DATA_DIR: join(dir, "agent"),
      HOSTKEEPER_TOKEN: BENCH_TOKEN,
      HOSTKEEPER_CADDY_ADMIN: `http://127.0.0.1:${c.adminPort}`,
      HOSTKEEPER_LOG_LEVEL: "warn",
    },
  });
  const stop = () => {
    if (child.pid && child.exitCode === null) process.kill(child.pid, "SIGKILL");
  };
  const end = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the agent exited with ${child.exitCode}`);
    const up = await httpRequest(port, "GET", "/readyz").then(
      (r) => r.status === 200,
      () => false,
    );
    if (up) break;
    if (Date.now() > end) {
      stop();
      throw new Error("the agent did not become ready");
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const call = (method: string, path: string, body?: unknown) =>
    httpRequest(port, method, path, { body, headers: { authorization: `Bearer ${BENCH_TOKEN}` } });
  return { child, stop, call };
}
