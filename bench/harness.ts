/**
 * What the benchmark's scenarios share: a twin pair of real Caddy instances (one the agent drives, one for the
 * raw admin-API calls), the agent started exactly as `npm start` starts it, plain loopback requests, and
 * the statistics and table rows the report prints.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import http from "node:http";
import { join } from "node:path";
import { projectRoot } from "../src/paths.js";
import { fetchedCaddyBinary } from "../src/proxy/settings.js";
import { freePort, httpRequest } from "../support/loopback.js";

export const TOKEN = "bench-token-0123456789abcdef";
export const UPSTREAM = "127.0.0.1:9";
export const routesPath = "/config/apps/http/servers/srv0/routes";

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

/** The route the agent writes for `writeBody(id)`, as a raw client would write it. */
export const routeJson = (id: string) => ({
  "@id": id,
  match: [{ host: [id] }],
  handle: [
    {
      handler: "reverse_proxy",
      upstreams: [{ dial: UPSTREAM }],
      load_balancing: { selection_policy: { policy: "first" } },
    },
  ],
  terminal: true,
});
export const writeBody = (id: string) => ({ domain: id, upstreams: [{ dial: UPSTREAM }] });

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
  child: ChildProcess;
}

/** A bare Caddy: admin on loopback TCP, nothing persisted, one empty server `srv0` on a loopback port. */
export async function startCaddy(dir: string, name: string): Promise<BenchCaddy> {
  const adminPort = await freePort();
  const httpPort = await freePort();
  const cfg = join(dir, `${name}.json`);
  writeFileSync(
    cfg,
    JSON.stringify({
      admin: { listen: `127.0.0.1:${adminPort}`, config: { persist: false } },
      apps: {
        http: {
          servers: {
            srv0: { listen: [`127.0.0.1:${httpPort}`], automatic_https: { disable: true }, routes: [] },
          },
        },
      },
    }),
  );
  const child = spawn(fetchedCaddyBinary, ["run", "--config", cfg], {
    stdio: "ignore",
    env: {
      ...process.env,
      XDG_CONFIG_HOME: join(dir, name, "cfg"),
      XDG_DATA_HOME: join(dir, name, "data"),
      HOME: dir,
    },
  });
  await waitHttp(adminPort, "/config/", child);
  return { adminPort, child };
}

export interface BenchAgent {
  port: number;
  child: ChildProcess;
  call: (method: string, path: string, body?: unknown) => Promise<Res>;
  auth: Record<string, string>;
}

/** The agent exactly as `npm start` runs it (scripts/start, the pinned Node, the same flags), on `caddy`. */
export async function startAgent(dir: string, caddy: BenchCaddy, extraEnv: Record<string, string> = {}) {
  const port = await freePort();
  const pkg = JSON.parse(readFileSync(join(projectRoot(), "package.json"), "utf8")) as {
    scripts: { start: string };
  };
  const child = spawn("sh", ["-c", `exec ${pkg.scripts.start}`], {
    cwd: projectRoot(),
    stdio: ["ignore", "ignore", "inherit"],
    env: {
      PATH: process.env.PATH,
      HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
      HOSTKEEPER_DATA_DIR: join(dir, "agent"),
      HOSTKEEPER_TOKEN: TOKEN,
      HOSTKEEPER_CADDY_ADMIN: `http://127.0.0.1:${caddy.adminPort}`,
      HOSTKEEPER_LOG_LEVEL: "warn",
      ...extraEnv,
    },
  });
  await waitHttp(port, "/healthz", child);
  const auth = { authorization: `Bearer ${TOKEN}` };
  const agent: BenchAgent = {
    port,
    child,
    auth,
    call: (method, path, body) => call(port, method, path, body, auth),
  };
  return agent;
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
