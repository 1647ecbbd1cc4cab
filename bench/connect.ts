/**
 * `npm run bench -- --connect`: the agent's connection to its control plane (issue 37), side by side in one
 * run, with the ratios against the targets:
 *
 * 1. Requests over the connection against the same requests over direct HTTP to the same agent (a real
 *    agent child started as `npm start` starts it, on a real Caddy; the control plane in this process):
 *    a single-route read and the list, at a small host's routes and at 20,000: over the connection, over
 *    HTTP on a kept-alive connection (the target's baseline: one persistent connection each way) and over
 *    HTTP on a new connection, in blocks of one way (sideBySide), each timed to the last byte of its body.
 * 2. What an idle connection costs the agent: agents with the connection and agents without, started in
 *    turn and left idle together; their resident memory, and their context switches (all threads,
 *    voluntary and not, from /proc/<pid>/task/<tid>/status) over the same window.
 * 3. The control plane's side: one process of the library (a child) holding BENCH_CONNECT_AGENTS simulated
 *    agents (another child, bench/connect-agents.ts): its memory per idle connection, its CPU while they
 *    idle, and a request's p50/p99 across them.
 *
 * Options (environment):
 *   BENCH_CONNECT_SIZES        route counts of part 1, default 300,20000 (the targets hold at each)
 *   BENCH_CONNECT_ROUNDS       single-route reads per size, default 200
 *   BENCH_CONNECT_LISTS        lists per size, default 20 above 5,000 routes, 60 below
 *   BENCH_CONNECT_BLOCK        requests of one way in a row, after one that is not timed: default 10 reads,
 *                              4 lists above 5,000 routes, 6 below
 *   BENCH_CONNECT_SCHEME       wss (TLS, the default, as in production) or ws (plain, loopback only), parts 1-2
 *   BENCH_CONNECT_IDLE_PAIRS   agents with and without the connection in part 2, default 5 of each (an idle agent's
 *                              memory varies by 1-2 MB from one start to the next)
 *   BENCH_CONNECT_SETTLE_SECONDS  how long they settle before the window, default 25
 *   BENCH_CONNECT_IDLE_SECONDS the idle window, default 45 (three heartbeats)
 *   BENCH_CONNECT_AGENTS       simulated agents in part 3, default 2000 (0 skips part 3)
 *   BENCH_CONNECT_CP_SCHEME    wss (default) or ws, part 3
 *   BENCH_CONNECT_REQUESTS     requests across them with BENCH_CONNECT_CONCURRENCY (default 100) in flight,
 *                              default 4000 (after one request to each agent, one at a time)
 *   BENCH_CONNECT_PARTS        which parts to run, default 1,2,3
 */
import type { ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ConnectedAgent } from "../src/connect/control-plane/index.js";
import { projectRoot } from "../src/paths.js";
import { startControlPlane, type TestControlPlane } from "../test/helpers/control-plane.js";
import { type ControlPlaneResult, controlPlanePart, controlPlaneTable } from "./connect-fleet.js";
import { connectedAgent, IDLE_TARGETS, type IdleResult, idlePart, idleTable } from "./connect-idle.js";
import {
  admin,
  type BenchCaddy,
  benchRoute,
  expect,
  fmt,
  leadingRoutes,
  loadAverage,
  quantile,
  routesPath,
  rssMb,
  startAgent,
  startCaddy,
  TOKEN,
} from "./harness.js";

const env = process.env;
const SIZES = (env.BENCH_CONNECT_SIZES ?? "300,20000").split(",").map(Number);
const ROUNDS = Number(env.BENCH_CONNECT_ROUNDS ?? 200);
const LISTS = env.BENCH_CONNECT_LISTS ? Number(env.BENCH_CONNECT_LISTS) : undefined;
const BLOCK = env.BENCH_CONNECT_BLOCK ? Number(env.BENCH_CONNECT_BLOCK) : undefined;
const SCHEME = env.BENCH_CONNECT_SCHEME === "ws" ? "ws" : "wss";
const PARTS = new Set((env.BENCH_CONNECT_PARTS ?? "1,2,3").split(",").map(Number));

/** Issue 37's targets: a request over the connection against direct HTTP, and an idle connection's cost. */
const TARGETS = { ratio: 1.25, ...IDLE_TARGETS };

// ----- part 1: requests over the connection and over HTTP

type Via = "connection" | "keepalive" | "new";

interface Sample {
  ms: number;
  bytes: number;
  body?: Buffer;
}

interface RequestRow {
  name: string;
  routes: number;
  bytes: number;
  n: number;
  connection: { median: number; p95: number };
  keepalive: { median: number; p95: number };
  newConnection: { median: number; p95: number };
  /** Connection median over HTTP keep-alive median: the target's ratio. */
  ratio: number;
  /** Connection median over HTTP new-connection median, for information. */
  ratioNew: number;
  met: boolean;
  /** Keep-alive requests sent again after a reset of their reused connection. */
  resent: number;
}

function httpGet(port: number, path: string, agent: http.Agent | false, keep: boolean): Promise<Sample> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        path,
        method: "GET",
        agent,
        headers: { authorization: `Bearer ${TOKEN}` },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const body = Buffer.concat(chunks);
          const ms = performance.now() - t0;
          if (res.statusCode !== 200)
            reject(new Error(`GET ${path} over HTTP: ${res.statusCode} ${body.toString().slice(0, 200)}`));
          else resolve({ ms, bytes: body.length, ...(keep ? { body } : {}) });
        });
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end();
  });
}

async function connectionGet(agent: ConnectedAgent, path: string, keep: boolean): Promise<Sample> {
  const t0 = performance.now();
  const res = await agent.fetch(path);
  const body = Buffer.from(await res.arrayBuffer());
  const ms = performance.now() - t0;
  if (res.status !== 200)
    throw new Error(`GET ${path} over the connection: ${res.status} ${body.toString().slice(0, 200)}`);
  return { ms, bytes: body.length, ...(keep ? { body } : {}) };
}

const ORDERS: Via[][] = [
  ["connection", "keepalive", "new"],
  ["keepalive", "new", "connection"],
  ["new", "connection", "keepalive"],
];

/**
 * `n` requests of each of the three ways for the paths `pathOf(i)`, in blocks of `block` requests of one
 * way, the ways' order rotating from one set of blocks to the next so that machine noise hits all three.
 * Each block starts with a request that is not timed: it pays for what the other way's requests left
 * behind. Timed one after the other, each request pays for the last one's garbage, which the agent
 * collects during the next request whatever it is: a list over HTTP left the agent about 20 ms of
 * collection that the list after it paid (docs/performance.md, "The control plane's connection").
 */
async function sideBySide(
  name: string,
  routes: number,
  n: number,
  block: number,
  pathOf: (i: number) => string,
  send: Record<Via, (path: string, keep: boolean) => Promise<Sample>>,
): Promise<RequestRow> {
  const ms: Record<Via, number[]> = { connection: [], keepalive: [], new: [] };
  // Warm-up, and the answers compared byte for byte: the connection carries what HTTP does.
  for (let i = 0; i < 3; i++) {
    const [c, k] = [await send.connection(pathOf(i), true), await send.keepalive(pathOf(i), true)];
    if (!c.body?.equals(k.body as Buffer))
      throw new Error(`${name}: the answer over the connection differs from the one over HTTP`);
    await send.new(pathOf(i), false);
  }
  let bytes = 0;
  let resent = 0;
  const once = (via: Via, path: string) =>
    send[via](path, false).catch((err: NodeJS.ErrnoException) => {
      // A kept-alive connection the agent closed as the request went out: sent again, once, on a new one.
      if (via !== "keepalive" || err.code !== "ECONNRESET") throw err;
      resent++;
      return send[via](path, false);
    });
  for (let done = 0, b = 0; done < n; done += block, b++) {
    for (const via of ORDERS[b % ORDERS.length] as Via[]) {
      await once(via, pathOf(done));
      for (let i = done; i < Math.min(n, done + block); i++) {
        const s = await once(via, pathOf(i));
        ms[via].push(s.ms);
        bytes = s.bytes;
      }
    }
  }
  const stat = (xs: number[]) => ({ median: quantile(xs, 0.5), p95: quantile(xs, 0.95) });
  const connection = stat(ms.connection);
  const keepalive = stat(ms.keepalive);
  const newConnection = stat(ms.new);
  const ratio = connection.median / keepalive.median;
  return {
    name,
    routes,
    bytes,
    n,
    connection,
    keepalive,
    newConnection,
    ratio,
    ratioNew: connection.median / newConnection.median,
    met: ratio <= TARGETS.ratio,
    resent,
  };
}

interface RequestsResult {
  rows: RequestRow[];
  agentRssMb: number;
}

async function requestsPart(dir: string, cp: TestControlPlane, caddy: BenchCaddy): Promise<RequestsResult> {
  const agent = await startAgent(dir, caddy, { env: cp.agentEnv() });
  try {
    const conn = await connectedAgent(agent, cp);
    const keepAliveAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const send: Record<Via, (path: string, keep: boolean) => Promise<Sample>> = {
      connection: (path, keep) => connectionGet(conn, path, keep),
      keepalive: (path, keep) => httpGet(agent.port, path, keepAliveAgent, keep),
      new: (path, keep) => httpGet(agent.port, path, false, keep),
    };
    const rows: RequestRow[] = [];
    for (const size of SIZES) {
      const ids = Array.from({ length: size }, (_, i) => `load${i}.s${size}.bench.test`);
      const base = [...leadingRoutes(), ...ids.map((id, i) => benchRoute(id, i))];
      expect(await admin(caddy, "PATCH", routesPath, base), 200, "load routes");
      // The agent's first read of them (it learns of the load from Caddy's metrics).
      expect(await agent.call("GET", "/v1/proxy/routes"), 200, "first list");
      // Reads of one route spread over the routes (the same route for the three ways in a round).
      const step = Math.max(1, Math.floor(size / 97));
      rows.push(
        await sideBySide(
          "GET /v1/proxy/routes/{id}",
          size,
          ROUNDS,
          BLOCK ?? 10,
          (i) => `/v1/proxy/routes/${ids[(i * step) % size]}`,
          send,
        ),
      );
      rows.push(
        await sideBySide(
          "GET /v1/proxy/routes",
          size,
          LISTS ?? (size > 5000 ? 20 : 60),
          BLOCK ?? (size > 5000 ? 4 : 6),
          () => "/v1/proxy/routes",
          send,
        ),
      );
      expect(await admin(caddy, "PATCH", routesPath, leadingRoutes()), 200, "clear routes");
    }
    keepAliveAgent.destroy();
    return { rows, agentRssMb: rssMb(agent.child.pid as number) };
  } finally {
    await agent.end();
  }
}

// ----- the report

function requestsTable(rows: RequestRow[]): string[] {
  return [
    `| request (${SCHEME}) | routes | bytes | n | connection median ms | p95 | HTTP keep-alive median ms | p95 | ratio | target | met | HTTP new connection median ms | ratio to it |`,
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.name} | ${r.routes} | ${r.bytes} | ${r.n} | ${fmt(r.connection.median)} | ${fmt(r.connection.p95)} | ${fmt(r.keepalive.median)} | ${fmt(r.keepalive.p95)} | ${r.ratio.toFixed(2)} | <= ${TARGETS.ratio} | ${r.met ? "yes" : "NO"} | ${fmt(r.newConnection.median)} | ${r.ratioNew.toFixed(2)} |`,
    ),
    ...rows
      .filter((r) => r.resent > 0)
      .map((r) => `  ${r.name} at ${r.routes}: ${r.resent} keep-alive requests sent again after a reset`),
  ];
}

export async function connectBench(argv: readonly string[]): Promise<number | undefined> {
  if (!argv.includes("--connect")) return undefined;
  const dir = mkdtempSync(join(tmpdir(), "hk-bench-connect-"));
  const cleanups: (() => unknown)[] = [];
  const children: ChildProcess[] = [];
  process.on("exit", () => {
    for (const c of children)
      try {
        if (c.pid && c.exitCode === null) process.kill(c.pid, "SIGKILL");
      } catch {
        // gone already
      }
    rmSync(dir, { recursive: true, force: true });
  });
  const loadBefore = loadAverage();
  const at = new Date().toISOString();
  const lines: string[] = [`node ${process.version}; load average before: ${loadBefore}`];
  let requests: RequestsResult | undefined;
  let idle: IdleResult | undefined;
  let cpSide: ControlPlaneResult | undefined;
  try {
    if (PARTS.has(1) || PARTS.has(2)) {
      const cp = await startControlPlane({ after: (fn) => cleanups.push(fn) }, { plain: SCHEME === "ws" });
      if (PARTS.has(1)) {
        const caddy = await startCaddy(dir, "connect-caddy");
        children.push(caddy.child);
        requests = await requestsPart(dir, cp, caddy);
        caddy.stop();
        console.log([...requestsTable(requests.rows), ""].join("\n"));
      }
      if (PARTS.has(2)) {
        idle = await idlePart(dir, cp);
        console.log([...idleTable(idle), ""].join("\n"));
      }
      for (const fn of cleanups.splice(0)) await fn();
    }
    if (PARTS.has(3)) {
      cpSide = await controlPlanePart();
      if (cpSide) console.log([...controlPlaneTable(cpSide), ""].join("\n"));
    }
  } finally {
    for (const fn of cleanups.splice(0)) await fn();
  }
  const loadAfter = loadAverage();
  lines.push(`load average after: ${loadAfter}`);
  console.log(lines.join("\n"));

  const outDir = join(projectRoot(), "bench", "results");
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, `connect-${at.replace(/[:.]/g, "-")}.json`);
  writeFileSync(
    file,
    JSON.stringify(
      {
        at,
        node: process.version,
        scheme: SCHEME,
        targets: TARGETS,
        requests,
        idle,
        controlPlane: cpSide,
        load: { before: loadBefore, after: loadAfter },
      },
      null,
      2,
    ),
  );
  console.log(`\nJSON: ${file}`);
  const ok =
    (requests?.rows.every((r) => r.met) ?? true) &&
    (idle === undefined || (idle.costMb <= TARGETS.idleMb && idle.costWakeups <= TARGETS.wakeupsPerSecond));
  return ok ? 0 : 1;
}
