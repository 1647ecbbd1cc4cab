/**
 * What `stream_close_delay` costs Caddy: with it, the handlers of a config replaced by a reload keep their
 * upgraded streams (and so the whole old config they belong to) until the delay expires. This opens
 * websockets through the routes before every reload, as a busy host's clients do, and reads Caddy's heap
 * and RSS after M reloads, with and without the delay, at each size.
 * Run: `npm run build && scripts/node dist/bench/streams.js` (BENCH_STREAM_SIZES, BENCH_STREAM_RELOADS,
 * BENCH_STREAMS_PER_RELOAD).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectWs, startEchoServer, type WsClient } from "../support/websocket.js";
import { admin, type BenchCaddy, caddyMemory, routeJson, routesPath, startCaddy } from "./harness.js";

const SIZES = (process.env.BENCH_STREAM_SIZES ?? "1000,20000").split(",").map(Number);
const RELOADS = Number(process.env.BENCH_STREAM_RELOADS ?? 20);
const PER_RELOAD = Number(process.env.BENCH_STREAMS_PER_RELOAD ?? 5);
const DELAYS = (process.env.BENCH_STREAM_DELAYS ?? "0,10m").split(",");

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface StreamRow {
  routes: number;
  delay: string;
  reloads: number;
  streamsOpened: number;
  streamsAlive: number;
  heapBeforeMb: number;
  heapAfterMb: number;
  rssBeforeMb: number;
  rssAfterMb: number;
  goroutinesAfter: number;
}

async function one(dir: string, size: number, delay: string): Promise<StreamRow> {
  const echo = await startEchoServer();
  const caddy: BenchCaddy = await startCaddy(dir, `streams-${size}-${delay}`);
  try {
    const dial = `127.0.0.1:${echo.port}`;
    const d = delay === "0" ? undefined : delay;
    const routes = Array.from({ length: size }, (_, i) => routeJson(`r${i}.streams.test`, dial, d));
    const load = await admin(caddy, "PATCH", routesPath, routes);
    if (load.status !== 200) throw new Error(`loading routes: ${load.status} ${load.body}`);
    await sleep(3000);
    const before = await caddyMemory(caddy);
    const clients: WsClient[] = [];
    for (let m = 0; m < RELOADS; m++) {
      for (let k = 0; k < PER_RELOAD; k++) {
        const host = `r${1 + ((m * PER_RELOAD + k) % (size - 1))}.streams.test`;
        const ws = await connectWs(caddy.httpPort, host);
        await ws.echo("hello");
        clients.push(ws);
      }
      // Route 0 is the one that changes: every reload replaces a config in which streams were opened.
      const body = routeJson("r0.streams.test", dial, d);
      const r = await admin(caddy, "PATCH", `${routesPath}/0`, { ...body, terminal: m % 2 !== 0 });
      if (r.status !== 200) throw new Error(`reload ${m}: ${r.status} ${r.body}`);
    }
    // Two GC cycles' worth of time: what is left is what the old configs' streams keep alive.
    await sleep(5000);
    const after = await caddyMemory(caddy);
    const alive = clients.filter((c) => c.isOpen()).length;
    for (const c of clients) c.close();
    return {
      routes: size,
      delay: d ?? "none",
      reloads: RELOADS,
      streamsOpened: clients.length,
      streamsAlive: alive,
      heapBeforeMb: before.heapInuseMb,
      heapAfterMb: after.heapInuseMb,
      rssBeforeMb: before.rssMb,
      rssAfterMb: after.rssMb,
      goroutinesAfter: after.goroutines,
    };
  } finally {
    caddy.stop();
    await echo.close();
  }
}

export async function streamsBench(): Promise<StreamRow[]> {
  const dir = mkdtempSync(join(tmpdir(), "hk-bench-streams-"));
  const rows: StreamRow[] = [];
  try {
    for (const size of SIZES) for (const delay of DELAYS) rows.push(await one(dir, size, delay));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return rows;
}

export function streamsTable(rows: StreamRow[]): string {
  const f = (n: number) => n.toFixed(1);
  return [
    "| routes | stream_close_delay | reloads | streams opened (alive after) | Caddy heap in use MB before -> after | Caddy RSS MB before -> after | goroutines after |",
    "|---|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.routes} | ${r.delay} | ${r.reloads} | ${r.streamsOpened} (${r.streamsAlive}) | ${f(r.heapBeforeMb)} -> ${f(r.heapAfterMb)} | ${f(r.rssBeforeMb)} -> ${f(r.rssAfterMb)} | ${r.goroutinesAfter} |`,
    ),
  ].join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  streamsBench().then(
    (rows) => console.log(streamsTable(rows)),
    (err: unknown) => {
      console.error(err);
      process.exit(2);
    },
  );
}
