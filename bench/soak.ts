/**
 * Soak: `clients` concurrent clients against the agent holding `size` routes for a while, sampling its
 * resident memory. Each client loops over a mix of what a platform sends: reads of one route (most), the
 * whole list, the health and status probes, and a create then delete of a route of its own. Growth is what
 * the idle agent holds after the soak over what it held idle before it, both read `IDLE_MS` after the last
 * request (the agent has put away what it parsed and collected by then): while clients run, its resident
 * memory swings by 50-100 MB from one sample to the next, which two one-minute means of it (also given,
 * as the trend) cannot tell from a few MB left behind.
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
  /** The idle agent before the soak and after it. */
  idleBeforeMb: number;
  idleAfterMb: number;
  /** `idleAfterMb - idleBeforeMb`. */
  growthMb: number;
  /** The first minute's mean after warm-up, the last minute's, and the largest sample. */
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
  // The agent reads the routes once, then is left idle: what it holds so is what the soak must not add to.
  expect(await agent.call("GET", "/v1/proxy/routes"), 200, "list (soak)");
  await sleep(IDLE_MS);
  const idleBeforeMb = rssMb(pid);
  // Keep-alive, as a platform's client would: the agent's own per-connection state is part of the soak.
  const keepAlive = new http.Agent({ keepAlive: true, maxSockets: opts.clients });
  let requests = 0;
  let failures = 0;
  const failedBy: Record<string, number> = {};
  const fail = (what: string) => {
    failures++;
    failedBy[what] = (failedBy[what] ?? 0) + 1;
  };
  let stop = false;
  const get = async (what: string, path: string, headers: Record<string, string>) => {
    const r = await drainGet(agent.port, path, headers, keepAlive);
    if (r.status !== 200) fail(`${what} ${r.status}`);
  };
  const one = async (n: number, i: number) => {
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
    const id = `soak${(n * 997 + i * 31) % opts.routes}.bench.test`;
    return get("get one", `/v1/proxy/routes/${id}`, agent.auth);
  };
  const client = async (n: number) => {
    for (let i = n; !stop; i++) {
      try {
        await one(n, i);
      } catch (err) {
        fail(`request ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
      }
      requests++;
    }
  };
  const started = Date.now();
  const running = Array.from({ length: opts.clients }, (_, n) => client(n));
  const samples: { t: number; rssMb: number }[] = [];
  const total = opts.warmupSeconds + opts.seconds;
  while ((Date.now() - started) / 1000 < total) {
    await sleep(5000);
    samples.push({ t: Math.round((Date.now() - started) / 1000), rssMb: rssMb(pid) });
  }
  stop = true;
  await Promise.all(running);
  keepAlive.destroy();
  await sleep(IDLE_MS);
  const idleAfterMb = rssMb(pid);
  expect(await call(agentsCaddy.adminPort, "PATCH", routesPath, []), 200, "clear routes (soak)");
  const after = samples.filter((s) => s.t > opts.warmupSeconds);
  const window = Math.min(60, opts.seconds / 2);
  const first = after.filter((s) => s.t <= opts.warmupSeconds + window).map((s) => s.rssMb);
  const last = after.filter((s) => s.t > total - window).map((s) => s.rssMb);
  return {
    seconds: opts.seconds,
    warmupSeconds: opts.warmupSeconds,
    clients: opts.clients,
    routes: opts.routes,
    requests,
    failures,
    failedBy,
    idleBeforeMb,
    idleAfterMb,
    growthMb: idleAfterMb - idleBeforeMb,
    rssAfterWarmupMb: mean(first),
    rssEndMb: mean(last),
    rssMaxMb: Math.max(...after.map((s) => s.rssMb)),
    samples,
  };
}
