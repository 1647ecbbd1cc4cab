/**
 * Part 2 of `npm run bench -- --connect` (bench/connect.ts): what an idle connection costs the agent. Agents
 * with the connection and agents without, started in turn and left idle together; their resident memory, and
 * their context switches (all threads, voluntary and not, from /proc/<pid>/task/<tid>/status) over the same
 * window.
 */
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { ConnectedAgent } from "../src/connect/control-plane/index.js";
import type { TestControlPlane } from "../test/helpers/control-plane.js";
import {
  type BenchAgent,
  type BenchCaddy,
  cpuSeconds,
  expect,
  quantile,
  rssMb,
  startAgent,
  startCaddy,
} from "./harness.js";

const env = process.env;
const SCHEME = env.BENCH_CONNECT_SCHEME === "ws" ? "ws" : "wss";
const IDLE_PAIRS = Number(env.BENCH_CONNECT_IDLE_PAIRS ?? 5);
const SETTLE_S = Number(env.BENCH_CONNECT_SETTLE_SECONDS ?? 25);
const IDLE_S = Number(env.BENCH_CONNECT_IDLE_SECONDS ?? 45);
export const IDLE_TARGETS = { idleMb: 3, wakeupsPerSecond: 1 };
/** The control plane's handle of `agent`, once the agent is connected. */
export async function connectedAgent(agent: BenchAgent, cp: TestControlPlane): Promise<ConnectedAgent> {
  const status = JSON.parse(expect(await agent.call("GET", "/v1/status"), 200, "status").body) as {
    connect: { fingerprint: string };
  };
  return cp.cp.waitForAgent(status.connect.fingerprint);
}

/** Context switches of every thread of `pid`, voluntary and not, and how many threads it has. */
function contextSwitches(pid: number): { switches: number; threads: number } {
  let switches = 0;
  let threads = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const s = readFileSync(`/proc/${pid}/task/${tid}/status`, "utf8");
      const v = /^voluntary_ctxt_switches:\s+(\d+)/m.exec(s)?.[1];
      const nv = /^nonvoluntary_ctxt_switches:\s+(\d+)/m.exec(s)?.[1];
      switches += Number(v ?? 0) + Number(nv ?? 0);
      threads++;
    } catch {
      // the thread ended meanwhile
    }
  }
  return { switches, threads };
}

interface IdleAgent {
  connected: boolean;
  pid: number;
  rssMb: number;
  rssSamplesMb: number[];
  switchesPerSecond: number;
  threads: number;
  cpuMsPerMinute: number;
}

export interface IdleResult {
  agents: IdleAgent[];
  withMb: number;
  withoutMb: number;
  costMb: number;
  withWakeups: number;
  withoutWakeups: number;
  costWakeups: number;
  seconds: number;
}

const median = (xs: number[]) => quantile(xs, 0.5);

export async function idlePart(dir: string, cp: TestControlPlane): Promise<IdleResult> {
  const started: { agent: BenchAgent; caddy: BenchCaddy; connected: boolean }[] = [];
  try {
    for (let i = 0; i < IDLE_PAIRS; i++) {
      // In turn, the first of each pair alternating, so neither kind always starts on a busier machine.
      for (const connected of i % 2 === 0 ? [true, false] : [false, true]) {
        // Each agent a data dir of its own (its key, its database).
        const own = join(dir, `idle-${i}-${connected ? "with" : "without"}`);
        mkdirSync(own);
        const caddy = await startCaddy(own, "caddy");
        const agent = await startAgent(own, caddy, connected ? { env: cp.agentEnv() } : {});
        started.push({ agent, caddy, connected });
        // Both kinds answer the same requests over HTTP (the connected one's fingerprint comes with its
        // status). The list is a read of Caddy's routes, after which the agent makes its idle collection
        // (src/util/idle-gc.ts) 5 s later: without it, whether an agent fresh from its start has collected
        // its start's garbage is chance, 12-15 MB either way, and would decide the comparison.
        if (connected) await connectedAgent(agent, cp);
        else expect(await agent.call("GET", "/v1/status"), 200, "status");
        expect(await agent.call("GET", "/v1/proxy/routes"), 200, "list");
      }
    }
    await sleep(SETTLE_S * 1000);
    const pid = (a: BenchAgent) => a.child.pid as number;
    const before = started.map((s) => ({
      ctx: contextSwitches(pid(s.agent)),
      cpu: cpuSeconds(pid(s.agent)),
    }));
    const t0 = performance.now();
    const samples: number[][] = started.map(() => []);
    const end = t0 + IDLE_S * 1000;
    while (performance.now() < end) {
      await sleep(Math.min(5000, end - performance.now()));
      for (const [i, s] of started.entries()) samples[i]?.push(rssMb(pid(s.agent)));
    }
    const seconds = (performance.now() - t0) / 1000;
    const agents = started.map((s, i): IdleAgent => {
      const after = contextSwitches(pid(s.agent));
      const b = before[i] as { ctx: { switches: number }; cpu: number };
      const rss = samples[i] as number[];
      return {
        connected: s.connected,
        pid: pid(s.agent),
        rssMb: median(rss),
        rssSamplesMb: rss,
        switchesPerSecond: (after.switches - b.ctx.switches) / seconds,
        threads: after.threads,
        cpuMsPerMinute: ((cpuSeconds(pid(s.agent)) - b.cpu) * 1000 * 60) / seconds,
      };
    });
    const of = (connected: boolean, f: (a: IdleAgent) => number) =>
      median(agents.filter((a) => a.connected === connected).map(f));
    const withMb = of(true, (a) => a.rssMb);
    const withoutMb = of(false, (a) => a.rssMb);
    const withWakeups = of(true, (a) => a.switchesPerSecond);
    const withoutWakeups = of(false, (a) => a.switchesPerSecond);
    return {
      agents,
      withMb,
      withoutMb,
      costMb: withMb - withoutMb,
      withWakeups,
      withoutWakeups,
      costWakeups: withWakeups - withoutWakeups,
      seconds,
    };
  } finally {
    for (const s of started) {
      await s.agent.end();
      s.caddy.stop();
    }
  }
}

export function idleTable(r: IdleResult): string[] {
  const yes = (ok: boolean) => (ok ? "yes" : "NO");
  const range = (connected: boolean, f: (a: IdleAgent) => number) => {
    const xs = r.agents.filter((a) => a.connected === connected).map(f);
    return `${Math.min(...xs).toFixed(1)}-${Math.max(...xs).toFixed(1)}`;
  };
  return [
    `| idle agent (${SCHEME}, ${IDLE_PAIRS} of each, ${r.seconds.toFixed(0)} s after ${SETTLE_S} s settling) | with the connection | without | cost | target | met |`,
    "|---|---|---|---|---|---|",
    `| resident memory, MB (median; range) | ${r.withMb.toFixed(1)} (${range(true, (a) => a.rssMb)}) | ${r.withoutMb.toFixed(1)} (${range(false, (a) => a.rssMb)}) | ${r.costMb.toFixed(1)} | <= ${IDLE_TARGETS.idleMb} | ${yes(r.costMb <= IDLE_TARGETS.idleMb)} |`,
    `| context switches per second, all threads (median; range) | ${r.withWakeups.toFixed(2)} (${range(true, (a) => a.switchesPerSecond)}) | ${r.withoutWakeups.toFixed(2)} (${range(false, (a) => a.switchesPerSecond)}) | ${r.costWakeups.toFixed(2)} | <= ${IDLE_TARGETS.wakeupsPerSecond} | ${yes(r.costWakeups <= IDLE_TARGETS.wakeupsPerSecond)} |`,
    "",
    ...r.agents.map(
      (a) =>
        `  agent pid ${a.pid} ${a.connected ? "with   " : "without"}: ${a.rssMb.toFixed(1)} MB (samples ${a.rssSamplesMb.map((x) => x.toFixed(1)).join(", ")}), ${a.switchesPerSecond.toFixed(2)} switches/s over ${a.threads} threads, CPU ${a.cpuMsPerMinute.toFixed(0)} ms a minute`,
    ),
  ];
}
