/**
 * Part 3 of `npm run bench -- --connect` (bench/connect.ts): one process of the control plane's library (a
 * child) holding BENCH_CONNECT_AGENTS simulated agents (another child, bench/connect-agents.ts): its memory
 * per idle connection, its CPU while they idle, and a request's p50/p99 across them.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { projectRoot } from "../src/paths.js";
import type { CpMemory, LatencySummary, ToChild } from "./connect-agents.js";
import { cpuSeconds, fmt } from "./harness.js";

const env = process.env;
const AGENTS = Number(env.BENCH_CONNECT_AGENTS ?? 2000);
const CP_SCHEME = env.BENCH_CONNECT_CP_SCHEME === "ws" ? "ws" : "wss";
const REQUESTS = Number(env.BENCH_CONNECT_REQUESTS ?? 4000);
const CONCURRENCY = Number(env.BENCH_CONNECT_CONCURRENCY ?? 100);

interface Child {
  child: ChildProcess;
  ask<T>(msg: ToChild): Promise<T>;
}

/**
 * A child of bench/connect-agents.ts in `role`, its open-files limit raised to `files` when it is lower (as
 * far as the hard limit allows; the child reports what it got).
 */
function startChild(role: "control-plane" | "agents", files: number): Child {
  const script = join(projectRoot(), "dist", "bench", "connect-agents.js");
  const child = spawn(
    "sh",
    [
      "-c",
      `[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge ${files} ] || ulimit -n ${files} 2>/dev/null; exec "$0" "$@"`,
      process.execPath,
      "--expose-gc",
      "--enable-source-maps",
      script,
      role,
    ],
    { stdio: ["ignore", "inherit", "inherit", "ipc"] },
  );
  const waiting: ((m: { ok: boolean; value?: unknown; error?: string }) => void)[] = [];
  child.on("message", (m: { ok: boolean; value?: unknown; error?: string }) => waiting.shift()?.(m));
  child.on("exit", (code) => {
    for (const w of waiting.splice(0)) w({ ok: false, error: `the ${role} child exited (${code})` });
  });
  return {
    child,
    ask: <T>(msg: ToChild) =>
      new Promise<T>((resolve, reject) => {
        waiting.push((m) => (m.ok ? resolve(m.value as T) : reject(new Error(`${role}: ${m.error}`))));
        child.send(msg);
      }),
  };
}

export interface ControlPlaneResult {
  agents: number;
  scheme: string;
  openFiles: { controlPlane: number; agents: number };
  connectSeconds: number;
  memory: { base: CpMemory; half: CpMemory; full: CpMemory; afterRequests: CpMemory };
  perConnectionKb: { rss: number; heap: number; external: number; rssSecondHalf: number };
  idleCpuPercent: number;
  idleSeconds: number;
  alone: LatencySummary;
  concurrent: LatencySummary;
}

export async function controlPlanePart(): Promise<ControlPlaneResult | undefined> {
  if (AGENTS <= 0) return undefined;
  const files = AGENTS + 256;
  const cpChild = startChild("control-plane", files);
  const agentsChild = startChild("agents", files);
  try {
    const limits = {
      controlPlane: (await cpChild.ask<{ openFiles: number }>({ cmd: "limits" })).openFiles,
      agents: (await agentsChild.ask<{ openFiles: number }>({ cmd: "limits" })).openFiles,
    };
    if (Math.min(limits.controlPlane, limits.agents) < files)
      throw new Error(
        `${AGENTS} agents need ${files} open files in each child, and the limit is ${Math.min(limits.controlPlane, limits.agents)} (ulimit -n; the hard limit is too low to raise it)`,
      );
    const started = await cpChild.ask<{ url: string; caFile: string | undefined; key: string }>({
      cmd: "start",
      scheme: CP_SCHEME,
    });
    const { fingerprints } = await agentsChild.ask<{ fingerprints: string[] }>({
      cmd: "keys",
      count: AGENTS,
    });
    await cpChild.ask({ cmd: "enroll", fingerprints });
    const base = await cpChild.ask<CpMemory>({ cmd: "memory", agents: 0 });
    const connect = async (count: number) => {
      const r = await agentsChild.ask<{
        connected: number;
        failed: number;
        firstFailure?: string;
        ms: number;
      }>({
        cmd: "connect",
        url: started.url,
        caFile: started.caFile,
        controlPlaneKey: started.key,
        count,
        concurrency: 50,
      });
      if (r.failed > 0) throw new Error(`${r.failed} simulated agents failed to connect: ${r.firstFailure}`);
      return r.ms;
    };
    const halfCount = Math.floor(AGENTS / 2);
    let connectMs = await connect(halfCount);
    const half = await cpChild.ask<CpMemory>({ cmd: "memory", agents: halfCount });
    connectMs += await connect(AGENTS - halfCount);
    await sleep(5000);
    const full = await cpChild.ask<CpMemory>({ cmd: "memory", agents: AGENTS });
    // Its CPU while the agents idle: heartbeats both ways.
    const cpPid = cpChild.child.pid as number;
    const cpu0 = cpuSeconds(cpPid);
    const idleT0 = performance.now();
    await sleep(15_000);
    const idleSeconds = (performance.now() - idleT0) / 1000;
    const idleCpuPercent = ((cpuSeconds(cpPid) - cpu0) / idleSeconds) * 100;
    const alone = await cpChild.ask<LatencySummary>({ cmd: "requests", count: AGENTS, concurrency: 1 });
    const concurrent = await cpChild.ask<LatencySummary>({
      cmd: "requests",
      count: REQUESTS,
      concurrency: CONCURRENCY,
    });
    const afterRequests = await cpChild.ask<CpMemory>({ cmd: "memory", agents: AGENTS });
    const kb = (a: number, b: number, n: number) => ((a - b) * 1024) / n;
    await agentsChild.ask({ cmd: "stop" });
    await cpChild.ask({ cmd: "stop" });
    return {
      agents: AGENTS,
      scheme: CP_SCHEME,
      openFiles: limits,
      connectSeconds: connectMs / 1000,
      memory: { base, half, full, afterRequests },
      perConnectionKb: {
        rss: kb(full.rssMb, base.rssMb, AGENTS),
        heap: kb(full.heapUsedMb, base.heapUsedMb, AGENTS),
        external: kb(full.externalMb, base.externalMb, AGENTS),
        rssSecondHalf: kb(full.rssMb, half.rssMb, AGENTS - halfCount),
      },
      idleCpuPercent,
      idleSeconds,
      alone,
      concurrent,
    };
  } finally {
    for (const c of [agentsChild, cpChild])
      try {
        if (c.child.pid && c.child.exitCode === null) process.kill(c.child.pid, "SIGKILL");
      } catch {
        // gone already
      }
  }
}

export function controlPlaneTable(r: ControlPlaneResult): string[] {
  const m = r.memory;
  const lat = (s: LatencySummary) =>
    `${fmt(s.p50)} | ${fmt(s.p99)} | ${fmt(s.max)} | ${s.failed} | ${((s.requests / s.wallMs) * 1000).toFixed(0)}`;
  return [
    `| control plane, ${r.agents} simulated agents (${r.scheme}) | |`,
    "|---|---|",
    `| connected in | ${r.connectSeconds.toFixed(1)} s (50 handshakes at a time) |`,
    `| resident memory: before, with ${Math.floor(r.agents / 2)}, with ${r.agents}, after the requests (MB) | ${m.base.rssMb.toFixed(1)}, ${m.half.rssMb.toFixed(1)}, ${m.full.rssMb.toFixed(1)}, ${m.afterRequests.rssMb.toFixed(1)} |`,
    `| V8 heap used: the same (MB) | ${m.base.heapUsedMb.toFixed(1)}, ${m.half.heapUsedMb.toFixed(1)}, ${m.full.heapUsedMb.toFixed(1)}, ${m.afterRequests.heapUsedMb.toFixed(1)} |`,
    `| **per idle connection: resident** | **${r.perConnectionKb.rss.toFixed(1)} KB** (the second half alone: ${r.perConnectionKb.rssSecondHalf.toFixed(1)} KB) |`,
    `| per idle connection: V8 heap, external | ${r.perConnectionKb.heap.toFixed(1)} KB, ${r.perConnectionKb.external.toFixed(1)} KB |`,
    `| CPU while they idle (heartbeats both ways) | ${r.idleCpuPercent.toFixed(1)}% of one core over ${r.idleSeconds.toFixed(0)} s |`,
    `| open files limit (control plane, agents) | ${r.openFiles.controlPlane}, ${r.openFiles.agents} |`,
    "",
    "| requests across the agents (one route's JSON each) | p50 ms | p99 ms | max ms | failed | per second |",
    "|---|---|---|---|---|---|",
    `| ${r.alone.requests}, one at a time, one to each agent | ${lat(r.alone)} |`,
    `| ${r.concurrent.requests}, ${r.concurrent.concurrency} in flight, round-robin | ${lat(r.concurrent)} |`,
  ];
}
