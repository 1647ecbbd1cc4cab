/**
 * Concurrent changes: `npm run bench -- --throughput[=SECONDS]`. 200 clients each create a route of their own
 * and delete it again, in a loop, against an agent holding 20,000 routes (`BENCH_SIZES`' largest), for
 * SECONDS (default 60) after a 10-s warm-up; prints changes per second, p50 and p99 of a change. With
 * `BENCH_COMPARE_ROOT=<checkout>` (built, with its own node_modules) that checkout's agent runs the same load
 * in the same run, the two alternating twice, each on a Caddy of its own, and the ratios are printed: how
 * the project finds where throughput went between two commits. `BENCH_COMPARE_PATH` is the PATH that agent
 * runs with (its `npm start` runs `node` from it): `/usr/bin:/bin` for the machine's Node, as an older checkout
 * ran; by default the pinned Node's, which must then be what that checkout's native modules were built for.
 */
import http from "node:http";
import { join } from "node:path";
import {
  benchRoute,
  call,
  expect,
  quantile,
  routesPath,
  startAgent,
  startCaddy,
  TOKEN,
  writeBody,
} from "./harness.js";

export interface ThroughputResult {
  label: string;
  seconds: number;
  changes: number;
  failures: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
}

const CLIENTS = 200;
const WARMUP_S = 10;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One POST or DELETE on a keep-alive connection; the status and how long it took. */
function change(port: number, agent: http.Agent, method: string, path: string, body?: unknown) {
  const data = body === undefined ? undefined : JSON.stringify(body);
  const t0 = performance.now();
  return new Promise<{ status: number; ms: number }>((resolve, reject) => {
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        path,
        method,
        agent,
        headers: {
          authorization: `Bearer ${TOKEN}`,
          ...(data ? { "content-type": "application/json", "content-length": Buffer.byteLength(data) } : {}),
        },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - t0 }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(data);
  });
}

/** The load against one agent (the checkout at `root`) on a Caddy of its own holding `routes` routes. */
async function run(
  dir: string,
  label: string,
  root: string | undefined,
  routes: number,
  seconds: number,
): Promise<ThroughputResult> {
  const caddy = await startCaddy(dir, `tp-caddy-${label}`);
  try {
    const base = Array.from({ length: routes }, (_, i) => benchRoute(`tp${i}.bench.test`, i));
    expect(await call(caddy.adminPort, "PATCH", routesPath, base), 200, "load routes");
    const agent = await startAgent(dir, caddy, {
      // An older checkout may have no /readyz; its routes answer once its Caddy does.
      ...(root ? { root, readyPath: "/healthz" } : {}),
      env: {
        HOSTKEEPER_DATA_DIR: join(dir, `tp-agent-${label}`),
        ...(root && process.env.BENCH_COMPARE_PATH ? { PATH: process.env.BENCH_COMPARE_PATH } : {}),
      },
    });
    const keepAlive = new http.Agent({ keepAlive: true, maxSockets: CLIENTS });
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
      const latencies: number[] = [];
      let failures = 0;
      let measuring = false;
      let stop = false;
      const client = async (n: number) => {
        for (let i = 0; !stop; i++) {
          const id = `t${n}-${i}.tp.bench.test`;
          for (const [method, path, body, want] of [
            ["POST", "/v1/proxy/routes", writeBody(id), 201],
            ["DELETE", `/v1/proxy/routes/${id}`, undefined, 204],
          ] as const) {
            const r = await change(agent.port, keepAlive, method, path, body).catch(() => undefined);
            if (!measuring) continue;
            if (r?.status === want) latencies.push(r.ms);
            else failures++;
          }
        }
      };
      const clients = Array.from({ length: CLIENTS }, (_, n) => client(n));
      await sleep(WARMUP_S * 1000);
      measuring = true;
      const t0 = performance.now();
      await sleep(seconds * 1000);
      measuring = false;
      const elapsed = (performance.now() - t0) / 1000;
      stop = true;
      await Promise.all(clients);
      return {
        label,
        seconds: elapsed,
        changes: latencies.length,
        failures,
        perSecond: latencies.length / elapsed,
        p50Ms: quantile(latencies, 0.5),
        p99Ms: quantile(latencies, 0.99),
      };
    } finally {
      keepAlive.destroy();
      agent.stop();
    }
  } finally {
    caddy.stop();
  }
}

/** This checkout's agent, and `BENCH_COMPARE_ROOT`'s when set, alternating twice. */
export async function throughputBench(dir: string, routes: number, seconds: number): Promise<string[]> {
  const other = process.env.BENCH_COMPARE_ROOT;
  const results: ThroughputResult[] = [];
  for (let round = 0; round < (other ? 2 : 1); round++) {
    results.push(await run(dir, `this-${round}`, undefined, routes, seconds));
    if (other) results.push(await run(dir, `other-${round}`, other, routes, seconds));
  }
  const lines = [
    `concurrent changes: ${CLIENTS} clients creating and deleting routes of their own at ${routes} routes, ${seconds} s after ${WARMUP_S} s of warm-up`,
    "| agent | changes | per second | p50 ms | p99 ms | failed |",
    "|---|---|---|---|---|---|",
    ...results.map(
      (r) =>
        `| ${r.label.startsWith("this") ? "this checkout" : other} (${r.label}) | ${r.changes} | ${r.perSecond.toFixed(0)} | ${r.p50Ms.toFixed(0)} | ${r.p99Ms.toFixed(0)} | ${r.failures} |`,
    ),
  ];
  if (other) {
    const sum = (prefix: string, f: (r: ThroughputResult) => number) =>
      results.filter((r) => r.label.startsWith(prefix)).reduce((a, r) => a + f(r), 0);
    const perSecond = sum("this", (r) => r.changes) / sum("this", (r) => r.seconds);
    const otherPerSecond = sum("other", (r) => r.changes) / sum("other", (r) => r.seconds);
    lines.push(
      `this checkout makes ${(perSecond / otherPerSecond).toFixed(2)}x the changes per second of ${other} (target >= 1.00)`,
    );
  }
  return lines;
}
