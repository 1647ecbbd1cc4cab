/**
 * Caddy's resident memory at a size, with and without a Go memory limit: idle with the routes loaded, the
 * peak while the agent writes a burst of 100 concurrent creates, and 60 s after it. Each limit gets a Caddy
 * and an agent of its own, started as `npm start` starts the agent; Caddy gets `GOMEMLIMIT` the way the
 * agent's embedded Caddy and the packaged unit get it (HOSTKEEPER_CADDY_MEMORY_LIMIT_MB).
 */
import {
  admin,
  benchRoute,
  caddyMemory,
  expect,
  routesPath,
  rssMb,
  startAgent,
  startCaddy,
  writeBody,
} from "./harness.js";

export interface CaddyMemoryResult {
  /** The limit in MiB; undefined: none (Go's default, collect at 100% heap growth and keep what it got). */
  limitMb: number | undefined;
  routes: number;
  idleMb: number;
  peakMb: number;
  afterMb: number;
  /** How long the burst took through the agent, ms. */
  burstMs: number;
  heapIdleMb: number;
  heapAfterMb: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Samples `pid`'s resident memory every 50 ms while `work` runs and 2 s after it; the largest sample. */
async function peakWhile(pid: number, work: Promise<unknown>): Promise<number> {
  let peak = rssMb(pid);
  let done = false;
  const sampling = (async () => {
    while (!done) {
      peak = Math.max(peak, rssMb(pid));
      await sleep(50);
    }
  })();
  await work;
  await sleep(2000);
  done = true;
  await sampling;
  return peak;
}

export async function caddyMemoryRun(
  dir: string,
  routes: number,
  limitMb: number | undefined,
  tag: string,
  extraEnv: Record<string, string> = {},
): Promise<CaddyMemoryResult> {
  const env = { ...(limitMb === undefined ? {} : { GOMEMLIMIT: `${limitMb}MiB` }), ...extraEnv };
  const caddy = await startCaddy(dir, `mem-caddy-${tag}`, { env });
  try {
    const all = Array.from({ length: routes }, (_, i) => benchRoute(`m${i}.bench.test`, i));
    expect(await admin(caddy, "PATCH", routesPath, all), 200, "load routes");
    const agent = await startAgent(dir, caddy, { env: { HOSTKEEPER_DATA_DIR: `${dir}/mem-agent-${tag}` } });
    try {
      const pid = caddy.child.pid as number;
      await sleep(10_000);
      const idleMb = rssMb(pid);
      const heap = (await caddyMemory(caddy)).heapInuseMb;
      const t0 = performance.now();
      const burst = Promise.all(
        Array.from({ length: 100 }, (_, i) =>
          agent.call("POST", "/v1/proxy/routes", writeBody(`burst${i}.bench.test`)),
        ),
      );
      const peakMb = await peakWhile(pid, burst);
      const burstMs = performance.now() - t0 - 2000;
      for (const r of await burst) expect(r, 201, "burst create");
      await sleep(60_000);
      return {
        limitMb,
        routes,
        idleMb,
        peakMb,
        afterMb: rssMb(pid),
        burstMs,
        heapIdleMb: heap,
        heapAfterMb: (await caddyMemory(caddy)).heapInuseMb,
      };
    } finally {
      agent.stop();
    }
  } finally {
    caddy.stop();
  }
}
