/**
 * Concurrent changes: `npm run bench -- --throughput[=SECONDS]`. 200 clients change routes through the
 * agent for SECONDS after a 10-s warm-up, in two loads (bench/throughput-loads.ts): a small host, about 300
 * routes, where the clients create, replace and delete routes among 300 ids with a callback URL on every
 * change (a receiver on loopback answers them; 30 s by default), and the largest size (`BENCH_SIZES`',
 * 20,000 routes), where each client creates a route of its own and deletes it again (60 s by default).
 * `BENCH_THROUGHPUT_LOADS=small` or `=large` runs one of them. Prints changes per second, p50 and p99 of a
 * change, the failures, the agent's resident memory at its peak and once idle after each run, and the changes
 * answered per config write Caddy took (how many changes a write carried). With `BENCH_COMPARE_ROOT=<checkout>` (built, with its own
 * node_modules) that checkout's agent runs the same load in the same run, the two alternating
 * `BENCH_THROUGHPUT_ROUNDS` times (default 2; 1 without a checkout to compare), each on a Caddy of its own, and the ratios are printed: how the
 * project finds where throughput went between two commits. `BENCH_COMPARE_PATH` is the PATH that agent runs
 * with (its `npm start` runs `node` from it): `/usr/bin:/bin` for the machine's Node, as an older checkout
 * ran; by default the pinned Node's, which must then be what that checkout's native modules were built for.
 */
import http from "node:http";
import { join } from "node:path";
import {
  adminWrites,
  call,
  cpuSeconds,
  expect,
  IDLE_MS,
  quantile,
  routesPath,
  rssMb,
  startAgent,
  startCaddy,
  writeBody,
} from "./harness.js";
import { ownRoutes, smallHostMix, Tally, type ThroughputLoad } from "./throughput-loads.js";

export interface ThroughputResult {
  label: string;
  seconds: number;
  changes: number;
  failures: number;
  failedBy: Record<string, number>;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  /** Callbacks the receiver got while measuring, for a load that asks for them. */
  callbacks: number | undefined;
  /** CPU time the agent and its Caddy used per change answered while measuring (ms). */
  agentCpuMs: number;
  caddyCpuMs: number;
  /** The agent's resident memory: the most sampled (every second) while measuring, and once idle after it (MB). */
  peakMb: number;
  idleMb: number;
  /** Changes answered per config write Caddy's admin API took while measuring: how well the agent batches. */
  perWrite: number;
}

const CLIENTS = 200;
const WARMUP_S = 10;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The load against one agent (the checkout at `root`) on a Caddy of its own. */
async function run(dir: string, label: string, root: string | undefined, load: ThroughputLoad) {
  const caddy = await startCaddy(dir, `tp-caddy-${label}`);
  try {
    expect(await call(caddy.adminPort, "PATCH", routesPath, load.base()), 200, "load routes");
    const agent = await startAgent(dir, caddy, {
      // An older checkout may have no /readyz; its routes answer once its Caddy does.
      ...(root ? { root, readyPath: "/healthz" } : {}),
      env: {
        HOSTKEEPER_DATA_DIR: join(dir, `tp-agent-${label}`),
        ...(root && process.env.BENCH_COMPARE_PATH ? { PATH: process.env.BENCH_COMPARE_PATH } : {}),
      },
    });
    const keepAlive = new http.Agent({ keepAlive: true, maxSockets: CLIENTS });
    const tally = new Tally();
    const started = await load.start(tally);
    try {
      expect(await agent.call("GET", "/v1/proxy/routes"), 200, "agent lists the routes");
      // The agent's start-up work first: the routes were loaded raw, without the agent's stream_close_delay,
      // and it brings them in line (a rewrite of all of them) right after its first change. Changes made
      // one after the other wait for that, so no client's first change sits behind it into the measurement.
      for (let i = 0; i < 2; i++) {
        const id = `warmup${i}.tp.bench.test`;
        expect(await agent.call("POST", "/v1/proxy/routes", writeBody(id)), 201, "warm-up create");
        expect(await agent.call("DELETE", `/v1/proxy/routes/${id}`), 204, "warm-up delete");
      }
      const clients = Array.from({ length: CLIENTS }, (_, n) =>
        started.client(n, agent.port, keepAlive, tally),
      );
      await sleep(WARMUP_S * 1000);
      const cpu = () => [cpuSeconds(agent.child.pid as number), cpuSeconds(caddy.child.pid as number)];
      const cpu0 = cpu();
      const writes0 = await adminWrites(caddy);
      const pid = agent.child.pid as number;
      let peakMb = rssMb(pid);
      const sampling = setInterval(() => {
        peakMb = Math.max(peakMb, rssMb(pid));
      }, 1000);
      tally.measuring = true;
      const t0 = performance.now();
      await sleep(load.seconds * 1000);
      tally.measuring = false;
      clearInterval(sampling);
      const elapsed = (performance.now() - t0) / 1000;
      const writes = (await adminWrites(caddy)) - writes0;
      const used = cpu().map((c, i) => (1000 * (c - (cpu0[i] ?? 0))) / Math.max(1, tally.latencies.length));
      tally.stopped = true;
      await Promise.all(clients);
      await sleep(IDLE_MS);
      return {
        ...result(label, elapsed, tally, started.callbacks()),
        agentCpuMs: used[0] ?? 0,
        caddyCpuMs: used[1] ?? 0,
        peakMb,
        idleMb: rssMb(pid),
        perWrite: tally.latencies.length / Math.max(1, writes),
      };
    } finally {
      keepAlive.destroy();
      await started.stop();
      await agent.end();
    }
  } finally {
    caddy.stop();
  }
}

function result(label: string, seconds: number, t: Tally, callbacks: number | undefined) {
  const { latencies, failures, failedBy } = t;
  return {
    label,
    seconds,
    changes: latencies.length,
    failures,
    failedBy,
    perSecond: latencies.length / seconds,
    p50Ms: quantile(latencies, 0.5),
    p99Ms: quantile(latencies, 0.99),
    callbacks,
  };
}

/** One load against this checkout's agent and `other`'s when set, alternating `rounds` times. */
async function runLoad(dir: string, load: ThroughputLoad, other: string | undefined, rounds: number) {
  const results: ThroughputResult[] = [];
  for (let round = 0; round < rounds; round++) {
    results.push(await run(dir, `${load.key}-this-${round}`, undefined, load));
    if (other) results.push(await run(dir, `${load.key}-other-${round}`, other, load));
  }
  return results;
}

/** The report of one load: a row per run, and with `other` the ratios of the two, overall and per round. */
function report(load: ThroughputLoad, results: ThroughputResult[], other: string | undefined): string[] {
  const mine = (r: ThroughputResult) => r.label.includes("-this-");
  const withCallbacks = results.some((r) => r.callbacks !== undefined);
  const lines = [
    `concurrent changes: ${CLIENTS} clients ${load.title}, ${load.seconds} s after ${WARMUP_S} s of warm-up`,
    `| agent | changes | per second | p50 ms | p99 ms | failed | agent CPU ms/change | Caddy CPU ms/change | agent MB peak, idle | changes per Caddy write |${withCallbacks ? " callbacks/s |" : ""}`,
    `|---|---|---|---|---|---|---|---|---|---|${withCallbacks ? "---|" : ""}`,
    ...results.map(
      (r) =>
        `| ${mine(r) ? "this checkout" : other} (${r.label}) | ${r.changes} | ${r.perSecond.toFixed(0)} | ${r.p50Ms.toFixed(0)} | ${r.p99Ms.toFixed(0)} | ${r.failures}${r.failures > 0 ? ` ${JSON.stringify(r.failedBy)}` : ""} | ${r.agentCpuMs.toFixed(2)} | ${r.caddyCpuMs.toFixed(2)} | ${r.peakMb.toFixed(1)}, ${r.idleMb.toFixed(1)} | ${r.perWrite.toFixed(1)} |${withCallbacks ? ` ${((r.callbacks ?? 0) / r.seconds).toFixed(0)} |` : ""}`,
    ),
  ];
  if (!other) return lines;
  const rate = (rs: ThroughputResult[]) =>
    rs.reduce((a, r) => a + r.changes, 0) / rs.reduce((a, r) => a + r.seconds, 0);
  const ours = results.filter(mine);
  const theirs = results.filter((r) => !mine(r));
  const perRound = ours.map((r, i) => {
    const o = theirs[i];
    return o ? `${(r.perSecond / o.perSecond).toFixed(2)}x/${(r.p99Ms / o.p99Ms).toFixed(2)}` : "";
  });
  const p99 = (rs: ThroughputResult[]) =>
    quantile(
      rs.map((r) => r.p99Ms),
      0.5,
    );
  lines.push(
    `this checkout makes ${(rate(ours) / rate(theirs)).toFixed(2)}x the changes per second of ${other} (target >= 1.00); its median p99 is ${(p99(ours) / p99(theirs)).toFixed(2)}x (target <= 1.00); per round (changes/s ratio / p99 ratio): ${perRound.join(", ")}`,
  );
  return lines;
}

/**
 * The loads `BENCH_THROUGHPUT_LOADS` names (default both: the small host, then `largest` routes), each
 * against this checkout's agent and `BENCH_COMPARE_ROOT`'s when set. `seconds` overrides each load's default.
 */
export async function throughputBench(dir: string, largest: number, seconds?: number): Promise<string[]> {
  const other = process.env.BENCH_COMPARE_ROOT;
  const rounds = Number(process.env.BENCH_THROUGHPUT_ROUNDS ?? (other ? 2 : 1));
  const wanted = (process.env.BENCH_THROUGHPUT_LOADS ?? "small,large").split(",");
  const loads = [smallHostMix(seconds ?? 30), ownRoutes(largest, seconds ?? 60)].filter((l) =>
    wanted.includes(l.key),
  );
  const lines: string[] = [];
  for (const load of loads) {
    const results = await runLoad(dir, load, other, rounds);
    lines.push(...(lines.length > 0 ? [""] : []), ...report(load, results, other));
    // Printed as each load ends too: the two take about 25 minutes side by side.
    console.error(report(load, results, other).join("\n"));
  }
  return lines;
}
