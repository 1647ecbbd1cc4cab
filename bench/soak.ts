/**
 * Soak: `clients` concurrent clients against the agent holding `size` routes for a while, sampling its
 * resident memory. Each client loops over a mix of what a platform sends: reads of one route (most), the
 * whole list, the health and status probes, and a create then delete of a route of its own. The clients
 * first run a warm-up, then stop; the soak proper follows. Growth is what the idle agent holds after the
 * soak over what it held idle after the warm-up, each read `IDLE_MS` after the last request (the agent has
 * put away what it parsed and collected by then): a leak grows with the requests served, while the first
 * load an agent meets leaves a step (code compiled for it, the HTTP parsers Node keeps for reuse, glibc's
 * arena after 200 connections) that a second soak does not repeat. The step is printed too, as the idle agent after
 * the warm-up over the idle agent fresh on the routes. While clients run, resident memory swings by 50-100
 * MB from one sample to the next, which one-minute means of it (also given, as the trend) cannot tell from
 * a few MB left behind.
 */
import http from "node:http";
import {
  type BenchAgent,
  type BenchCaddy,
  benchRoute,
  call,
  drainGet,
  expect,
  IDLE_MS,
  routesPath,
  rssMb,
  writeBody,
} from "./harness.js";

export interface SoakResult {
  seconds: number;
  warmupSeconds: number;
  clients: number;
  routes: number;
  requests: number;
  failures: number;
  /** Failed requests by what failed: `<request> <status>` or `<request> <error>`. */
  failedBy: Record<string, number>;
  /** The idle agent fresh on the routes (one list read), after the warm-up, and after the soak. */
  idleFreshMb: number;
  idleBeforeMb: number;
  idleAfterMb: number;
  /** `idleBeforeMb - idleFreshMb`: what the first load left. */
  warmupStepMb: number;
  /** `idleAfterMb - idleBeforeMb`. */
  growthMb: number;
  /** The first minute's mean of the soak, the last minute's, and the largest sample (warm-up included). */
  rssAfterWarmupMb: number;
  rssEndMb: number;
  rssMaxMb: number;
  samples: { t: number; rssMb: number }[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);

export async function soak(
  agent: BenchAgent,
  agentsCaddy: BenchCaddy,
  opts: { seconds: number; warmupSeconds: number; clients: number; routes: number },
): Promise<SoakResult> {
  const base = Array.from({ length: opts.routes }, (_, i) => benchRoute(`soak${i}.bench.test`, i));
  expect(await call(agentsCaddy.adminPort, "PATCH", routesPath, base), 200, "load routes (soak)");
  const pid = agent.child.pid as number;
  // The agent reads the routes once, then is left idle: the step the warm-up makes is measured from here.
  expect(await agent.call("GET", "/v1/proxy/routes"), 200, "list (soak)");
  await sleep(IDLE_MS);
  const idleFreshMb = rssMb(pid);
  let requests = 0;
  let failures = 0;
  const failedBy: Record<string, number> = {};
  const fail = (what: string) => {
    failures++;
    failedBy[what] = (failedBy[what] ?? 0) + 1;
  };
  const samples: { t: number; rssMb: number }[] = [];
  const started = Date.now();
  // Runs the clients for `seconds`, sampling resident memory every 5 s, then waits `IDLE_MS` and reads the
  // idle agent. Keep-alive, as a platform's client would: the agent's per-connection state is part of it.
  const phase = async (seconds: number): Promise<number> => {
    const keepAlive = new http.Agent({ keepAlive: true, maxSockets: opts.clients });
    let stop = false;
    const client = async (n: number) => {
      for (let i = n; !stop; i++) {
        try {
          await oneRequest(agent, opts.routes, keepAlive, fail, n, i);
        } catch (err) {
          fail(`request ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
        }
        requests++;
      }
    };
    const from = Date.now();
    const running = Array.from({ length: opts.clients }, (_, n) => client(n));
    while ((Date.now() - from) / 1000 < seconds) {
      await sleep(5000);
      samples.push({ t: Math.round((Date.now() - started) / 1000), rssMb: rssMb(pid) });
    }
    stop = true;
    await Promise.all(running);
    keepAlive.destroy();
    await sleep(IDLE_MS);
    return rssMb(pid);
  };
  const idleBeforeMb = await phase(opts.warmupSeconds);
  const soakFrom = Math.round((Date.now() - started) / 1000);
  const idleAfterMb = await phase(opts.seconds);
  expect(await call(agentsCaddy.adminPort, "PATCH", routesPath, []), 200, "clear routes (soak)");
  const soaked = samples.filter((s) => s.t > soakFrom);
  const end = soaked.at(-1)?.t ?? soakFrom;
  const window = Math.min(60, opts.seconds / 2);
  const first = soaked.filter((s) => s.t <= soakFrom + window).map((s) => s.rssMb);
  const last = soaked.filter((s) => s.t > end - window).map((s) => s.rssMb);
  return {
    seconds: opts.seconds,
    warmupSeconds: opts.warmupSeconds,
    clients: opts.clients,
    routes: opts.routes,
    requests,
    failures,
    failedBy,
    idleFreshMb,
    idleBeforeMb,
    idleAfterMb,
    warmupStepMb: idleBeforeMb - idleFreshMb,
    growthMb: idleAfterMb - idleBeforeMb,
    rssAfterWarmupMb: mean(first),
    rssEndMb: mean(last),
    rssMaxMb: Math.max(...samples.map((s) => s.rssMb)),
    samples,
  };
}

/** Client `n`'s `i`th request of the soak's mix; a failure is told to `fail` (or thrown, for an error). */
async function oneRequest(
  agent: BenchAgent,
  routes: number,
  keepAlive: http.Agent,
  fail: (what: string) => void,
  n: number,
  i: number,
): Promise<void> {
  const get = async (what: string, path: string, headers: Record<string, string>) => {
    const r = await drainGet(agent.port, path, headers, keepAlive);
    if (r.status !== 200) fail(`${what} ${r.status}`);
  };
  const pick = i % 20;
  if (pick === 0) {
    const id = `c${n}-${i}.soak.bench.test`;
    const c = await agent.call("POST", "/v1/proxy/routes", writeBody(id));
    if (c.status !== 201) return fail(`create ${c.status}`);
    const d = await agent.call("DELETE", `/v1/proxy/routes/${id}`);
    if (d.status !== 204) fail(`delete ${d.status}`);
    return;
  }
  if (pick === 1) return get("list", "/v1/proxy/routes", agent.auth);
  if (pick === 2) return get("healthz", "/healthz", {});
  if (pick === 3) return get("status", "/v1/status", agent.auth);
  return get("get one", `/v1/proxy/routes/soak${(n * 997 + i * 31) % routes}.bench.test`, agent.auth);
}
