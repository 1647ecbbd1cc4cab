/**
 * Benchmark: the agent against the minimal raw Caddy admin-API calls that achieve the same, in one run
 * (ratios, not absolute times, decide pass or fail). Prints a table of medians, p95 and ratios against
 * the targets, the agent's resident memory, the machine's load average, and writes JSON to bench/results/.
 *
 * Run: `npm run bench` (after `bash scripts/install.sh`). Options (see docs/performance.md):
 *   --keepalive, --streams   the connection benchmarks instead (bench/connections.ts)
 *   --connect          the agent's connection to its control plane instead (bench/connect.ts)
 *   --throughput[=SECONDS]   concurrent changes instead, at about 300 routes with callbacks and at the largest size
 *                      (bench/throughput.ts; BENCH_COMPARE_ROOT: another checkout; BENCH_THROUGHPUT_LOADS=small|large)
 *   --soak[=SECONDS]   also soak the agent at the largest size with 200 clients (default 600 s, after 60 s warm-up)
 *   BENCH_SIZES        route counts, default 1000,20000 (targets hold at the largest)
 *   BENCH_ROUNDS       single changes of each kind per size, default 40 at 1,000 and 10 above 5,000
 *   BENCH_SEQUENTIAL   sequential raw calls the bursts are compared with, default 100 (fewer are scaled up)
 *   BENCH_BURSTS       bursts of each kind at the largest size, default 3 (the figure is their median)
 *   BENCH_CADDY_MEMORY=0   skip Caddy's memory with and without a Go memory limit (about 3 minutes)
 */
import type { ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CADDY_MEMORY_LIMIT_DEFAULT_MB } from "../src/caddy/settings.js";
import { projectRoot } from "../src/paths.js";
import { type CaddyMemoryResult, caddyMemoryRun } from "./caddy-memory.js";
import { connectBench } from "./connect.js";
import { connectionBenches } from "./connections.js";
import { loadAverage, type Row, rssMb, startAgent, startCaddy, table } from "./harness.js";
import { type ScaleResult, scale } from "./scale.js";
import { type SoakResult, soak } from "./soak.js";
import { throughputBench } from "./throughput.js";

const SIZES = (process.env.BENCH_SIZES ?? "1000,20000").split(",").map(Number);
const ROUNDS = process.env.BENCH_ROUNDS ? Number(process.env.BENCH_ROUNDS) : undefined;
const SEQUENTIAL = Number(process.env.BENCH_SEQUENTIAL ?? 100);
/**
 * The targets at the largest size (20,000 routes by default; the bursts run only there: the footprint
 * issue's), and those of the smaller sizes (the first benchmark's, at 1,000 and 5,000 routes): a fixed cost
 * per request weighs more where Caddy answers in a few milliseconds.
 */
const TARGETS = { single: 1.05, list: 1.1, burst: 80 };
const SMALLER_TARGETS = { single: 1.15, list: 1.5, burst: 20 };
const RSS_TARGET_MB = 90;
/** Resident memory the idle agent may hold after the soak over what it held after the soak's warm-up. */
const SOAK_GROWTH_MB = 5;

const soakArg = process.argv.slice(2).find((a) => a === "--soak" || a.startsWith("--soak="));
const SOAK_SECONDS = soakArg ? Number(soakArg.split("=")[1] ?? 600) : 0;

async function main() {
  const dir = mkdtempSync(join(tmpdir(), "hk-bench-"));
  // Registered before anything starts, so a start that fails (an agent whose dist/ is stale) leaves no Caddy.
  const children: ChildProcess[] = [];
  process.on("exit", () => {
    for (const c of children) if (c.pid && c.exitCode === null) process.kill(c.pid, "SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  });
  const agentsCaddy = await startCaddy(dir, "agent-caddy");
  children.push(agentsCaddy.child);
  const rawCaddy = await startCaddy(dir, "raw-caddy");
  children.push(rawCaddy.child);
  const agent = await startAgent(dir, agentsCaddy);
  children.push(agent.child);
  await new Promise((r) => setTimeout(r, 1000));
  const rssStart = rssMb(agent.child.pid as number);
  const loadBefore = loadAverage();

  const largest = Math.max(...SIZES);
  const results: (ScaleResult & { size: number })[] = [];
  for (const size of SIZES) {
    const rounds = ROUNDS ?? (size > 5000 ? 10 : 40);
    const r = await scale(agent, agentsCaddy, rawCaddy, size, {
      rounds,
      bursts: size === largest,
      sequential: SEQUENTIAL,
      targets: size === largest ? TARGETS : SMALLER_TARGETS,
      tag: `s${size}`,
    });
    results.push({ ...r, size });
  }
  const rows: Row[] = results.flatMap((r) => r.rows);
  // Caddy's own memory at the largest size, without a Go memory limit and with the agent's default.
  const caddyMem: CaddyMemoryResult[] = [];
  if (process.env.BENCH_CADDY_MEMORY !== "0")
    for (const limit of [undefined, CADDY_MEMORY_LIMIT_DEFAULT_MB])
      caddyMem.push(await caddyMemoryRun(dir, largest, limit, String(limit ?? "none")));
  const idleAtLargest = results.find((r) => r.size === largest)?.idleRssMb ?? Number.NaN;

  let soaked: SoakResult | undefined;
  if (SOAK_SECONDS > 0)
    soaked = await soak(agent, agentsCaddy, {
      seconds: SOAK_SECONDS,
      warmupSeconds: 60,
      clients: 200,
      routes: largest,
    });
  const loadAfter = loadAverage();

  const lines = [
    ...table(rows),
    "",
    `agent resident memory: ${rssStart.toFixed(1)} MB at start; with the routes loaded, 5 s after the last request: ${results
      .map((r) => `${r.afterWorkRssMb.toFixed(1)} MB at ${r.size}`)
      .join(", ")}; idle (20 s after it): ${results
      .map((r) => `${r.idleRssMb.toFixed(1)} MB at ${r.size}`)
      .join(
        ", ",
      )} (target <= ${RSS_TARGET_MB} MB idle at ${largest}: ${idleAtLargest <= RSS_TARGET_MB ? "yes" : "NO"})`,
  ];
  for (const m of caddyMem)
    lines.push(
      `Caddy resident memory at ${m.routes} routes, ${m.limitMb === undefined ? "no memory limit" : `GOMEMLIMIT ${m.limitMb}MiB`}: ${m.idleMb.toFixed(0)} MB idle, ${m.peakMb.toFixed(0)} MB at the peak of 100 concurrent creates through the agent (${(m.burstMs / 1000).toFixed(1)} s), ${m.afterMb.toFixed(0)} MB 60 s after; with the agent's ${results.find((r) => r.size === largest)?.idleRssMb.toFixed(0)} MB idle: ${(m.afterMb + (results.find((r) => r.size === largest)?.idleRssMb ?? Number.NaN)).toFixed(0)} MB together`,
    );
  if (soaked)
    lines.push(
      `soak: ${soaked.clients} clients for ${soaked.seconds} s after ${soaked.warmupSeconds} s warm-up at ${soaked.routes} routes, ${soaked.requests} requests, ${soaked.failures} failed${soaked.failures > 0 ? ` (${JSON.stringify(soaked.failedBy)})` : ""}; resident memory ${soaked.rssAfterWarmupMb.toFixed(1)} MB the first minute after warm-up, ${soaked.rssEndMb.toFixed(1)} MB the last (max ${soaked.rssMaxMb.toFixed(1)}); idle ${soaked.idleFreshMb.toFixed(1)} MB fresh on the routes, ${soaked.idleBeforeMb.toFixed(1)} MB after the warm-up (its step ${soaked.warmupStepMb.toFixed(1)} MB), ${soaked.idleAfterMb.toFixed(1)} MB after the soak: growth ${soaked.growthMb.toFixed(1)} MB (target <= ${SOAK_GROWTH_MB}: ${soaked.growthMb <= SOAK_GROWTH_MB ? "yes" : "NO"})`,
    );
  lines.push(`load average (1/5/15 min): ${loadBefore} before, ${loadAfter} after`);
  console.log(lines.join("\n"));

  const outDir = join(projectRoot(), "bench", "results");
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, `bench-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  writeFileSync(
    file,
    JSON.stringify(
      {
        at: new Date().toISOString(),
        sizes: SIZES,
        rows,
        bulk: results.map((r) => ({ size: r.size, ...r.bulk })),
        rss: {
          startMb: rssStart,
          afterWorkMb: Object.fromEntries(results.map((r) => [r.size, r.afterWorkRssMb])),
          idleMb: Object.fromEntries(results.map((r) => [r.size, r.idleRssMb])),
        },
        caddyMemory: caddyMem,
        soak: soaked,
        load: { before: loadBefore, after: loadAfter },
      },
      null,
      2,
    ),
  );
  console.log(`\nJSON: ${file}`);
  const ok =
    rows.every((r) => r.met) &&
    idleAtLargest <= RSS_TARGET_MB &&
    (soaked === undefined || (soaked.growthMb <= SOAK_GROWTH_MB && soaked.failures === 0));
  process.exit(ok ? 0 : 1);
}

/** `--throughput[=SECONDS]`: concurrent changes (bench/throughput.ts) instead of the rest. */
async function throughput(argv: readonly string[]): Promise<number | undefined> {
  const arg = argv.find((a) => a === "--throughput" || a.startsWith("--throughput="));
  if (!arg) return undefined;
  const dir = mkdtempSync(join(tmpdir(), "hk-bench-"));
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  const seconds = arg.split("=")[1];
  const lines = await throughputBench(
    dir,
    Math.max(...SIZES),
    seconds === undefined ? undefined : Number(seconds),
  );
  console.log(lines.join("\n"));
  return 0;
}

// `--keepalive` / `--streams`: the connection benchmarks (bench/connections.ts) instead of this one;
// `--connect`: the connection to the control plane (bench/connect.ts).
connectionBenches(process.argv.slice(2))
  .then(async (code) => code ?? (await throughput(process.argv.slice(2))))
  .then(async (code) => code ?? (await connectBench(process.argv.slice(2))))
  .then((code) => (code === undefined ? main() : process.exit(code)))
  .catch((err: unknown) => {
    console.error(err);
    process.exit(2);
  });
