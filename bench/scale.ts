/**
 * Scale: the agent's single changes, its list and bursts of concurrent changes against the minimal raw
 * admin-API calls at a given number of routes, and its resident memory there. The agent drives one Caddy
 * and the raw calls a twin Caddy holding the same routes: in production the agent is the only writer of
 * its Caddy, and raw writes interleaved on the same instance would make every agent write start from a
 * stale ETag. Rounds alternate agent and raw so drift in the machine's load hits both.
 */

import { metricSample } from "../support/prometheus.js";
import {
  type BenchAgent,
  type BenchCaddy,
  benchBody,
  benchRoute,
  call,
  expect,
  IDLE_MS,
  leadingRoutes,
  type Res,
  type Row,
  routesPath,
  row,
  rssMb,
  timed,
} from "./harness.js";

export interface ScaleTargets {
  /** Single create / replace / delete, agent median over raw median. */
  single: number;
  /** GET /v1/proxy/routes over a raw GET of the routes array. */
  list: number;
  /** 100 sequential raw calls over 100 concurrent agent calls (wall time). */
  burst: number;
}

export interface ScaleResult {
  rows: Row[];
  bulk: Record<string, number | number[]>;
  /**
   * The agent's resident memory with the routes loaded and changed through it, once idle: 20 s after its last
   * request, by when it has put its parsed routes away (10 s after the last read) and collected (5 s later).
   */
  idleRssMb: number;
  /** The same 5 s after the last request, before that: what the work just done left. */
  afterWorkRssMb: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Loads `size` routes into both Caddys, measures, and clears them again. `rounds` single changes of each
 * kind; bursts of `burst` concurrent agent changes against `sequential` raw calls (scaled to `burst`).
 */
export async function scale(
  agent: BenchAgent,
  agentsCaddy: BenchCaddy,
  rawCaddy: BenchCaddy,
  size: number,
  opts: { rounds: number; bursts: boolean; sequential: number; targets: ScaleTargets; tag: string },
): Promise<ScaleResult> {
  const raw = (method: string, path: string, body?: unknown) => call(rawCaddy.adminPort, method, path, body);
  const direct = (method: string, path: string, body?: unknown) =>
    call(agentsCaddy.adminPort, method, path, body);
  const { targets, tag } = opts;
  const rows: Row[] = [];
  const bulk: Record<string, number | number[]> = {};

  // Load the routes with one raw write (the fastest way there), then measure at that size.
  // A tenth of the routes carry site policies (redirect host, path, basic auth, headers, compression).
  const base = [
    ...leadingRoutes(),
    ...Array.from({ length: size }, (_, i) => benchRoute(`load${i}.s${size}.bench.test`, i)),
  ];
  expect(await raw("PATCH", routesPath, base), 200, "load routes (raw)");
  expect(await direct("PATCH", routesPath, base), 200, "load routes (agent)");
  // Warm both paths once.
  expect(await agent.call("GET", "/v1/proxy/routes"), 200, "agent list");
  expect(await raw("GET", routesPath), 200, "raw list");

  const ca: number[] = [];
  const cr: number[] = [];
  const ra: number[] = [];
  const rr: number[] = [];
  const da: number[] = [];
  const dr: number[] = [];
  for (let i = 0; i < opts.rounds; i++) {
    const a = `a${i}.${tag}.bench.test`;
    const r = `r${i}.${tag}.bench.test`;
    // Interleaved, so drift in the machine's load hits both sides alike.
    ca.push(
      await timed(async () =>
        expect(await agent.call("POST", "/v1/proxy/routes", benchBody(a, i)), 201, "agent create"),
      ),
    );
    cr.push(
      await timed(async () => expect(await raw("POST", routesPath, benchRoute(r, i)), 200, "raw create")),
    );
    ra.push(
      await timed(async () =>
        expect(
          await agent.call("PUT", `/v1/proxy/routes/${a}`, { ...benchBody(a, i), terminal: false }),
          200,
          "agent replace",
        ),
      ),
    );
    rr.push(
      await timed(async () => {
        const cur = JSON.parse(expect(await raw("GET", `/id/${r}`), 200, "raw read").body);
        expect(await raw("PATCH", `/id/${r}`, { ...cur, terminal: false }), 200, "raw replace");
      }),
    );
    da.push(
      await timed(async () =>
        expect(await agent.call("DELETE", `/v1/proxy/routes/${a}`), 204, "agent delete"),
      ),
    );
    dr.push(await timed(async () => expect(await raw("DELETE", `/id/${r}`), 200, "raw delete")));
  }
  rows.push(row("create", size, ca, cr, targets.single));
  rows.push(row("replace", size, ra, rr, targets.single));
  rows.push(row("delete", size, da, dr, targets.single));

  const ga: number[] = [];
  const gr: number[] = [];
  for (let i = 0; i < 20; i++) {
    ga.push(await timed(async () => expect(await agent.call("GET", "/v1/proxy/routes"), 200, "agent list")));
    gr.push(await timed(async () => expect(await raw("GET", routesPath), 200, "raw list")));
  }
  rows.push(row("list routes", size, ga, gr, targets.list));

  if (opts.bursts) {
    const b = await bursts(agent, raw, size, tag, opts.sequential, targets.burst);
    rows.push(...b.rows);
    Object.assign(bulk, b.bulk);
  }

  // The agent has read, changed and listed these routes: its memory just after, and once idle.
  await sleep(5000);
  const afterWorkRssMb = rssMb(agent.child.pid as number);
  await sleep(IDLE_MS - 5000);
  const idleRssMb = rssMb(agent.child.pid as number);

  expect(await raw("PATCH", routesPath, leadingRoutes()), 200, "clear routes (raw)");
  expect(await direct("PATCH", routesPath, leadingRoutes()), 200, "clear routes (agent)");
  return { rows, bulk, idleRssMb, afterWorkRssMb };
}

/** Bursts per run: each figure is their median, so one slow reload of Caddy does not make the run's figure. */
const BURSTS = Number(process.env.BENCH_BURSTS ?? 3);
/** A burst of 100 creates against one raw load of the config it leaves: at most this ratio. */
const BURST_VS_LOAD = 1.25;
const runs = (a: unknown[], b: unknown[]) =>
  a.length === b.length ? `${a.length}` : `${a.length} and ${b.length}`;

/**
 * `BURSTS` bursts of 100 concurrent agent creates, each followed by a burst of 100 concurrent deletes of
 * them, against `sequential` raw calls of each kind scaled to 100; the creates also against one raw write of
 * 100 routes appended (one load of the config they leave); and the writer's batches per burst (its
 * batch-size histogram before and after): one per burst is the aim.
 */
async function bursts(
  agent: BenchAgent,
  raw: (method: string, path: string, body?: unknown) => Promise<Res>,
  size: number,
  tag: string,
  sequential: number,
  target: number,
): Promise<{ rows: Row[]; bulk: Record<string, number | number[]> }> {
  const batches = async () =>
    metricSample(
      expect(await agent.call("GET", "/metrics"), 200, "agent metrics").body,
      "hostkeeper_route_write_batch_size_count",
    );
  const counted = async (run: () => Promise<unknown>) => {
    const before = await batches();
    const ms = await timed(run);
    return { ms, batches: (await batches()) - before };
  };
  const creates: { ms: number; batches: number }[] = [];
  const deletes: { ms: number; batches: number }[] = [];
  for (let round = 0; round < BURSTS; round++) {
    const ids = Array.from({ length: 100 }, (_, i) => `a-burst${i}.${round}.${tag}.bench.test`);
    creates.push(
      await counted(() =>
        Promise.all(
          ids.map(async (id, i) =>
            expect(await agent.call("POST", "/v1/proxy/routes", benchBody(id, i)), 201, "agent burst create"),
          ),
        ),
      ),
    );
    deletes.push(
      await counted(() =>
        Promise.all(
          ids.map(async (id) =>
            expect(await agent.call("DELETE", `/v1/proxy/routes/${id}`), 204, "agent burst delete"),
          ),
        ),
      ),
    );
  }
  // Sequential raw calls cost the same each (0.5% more or fewer routes): fewer than 100 are scaled up.
  const seq = Array.from({ length: Math.min(sequential, 100) }, (_, i) => `r-burst${i}.${tag}.bench.test`);
  const scaleUp = 100 / seq.length;
  const rawCreate =
    scaleUp *
    (await timed(async () => {
      for (const [i, id] of seq.entries())
        expect(await raw("POST", routesPath, benchRoute(id, i)), 200, "raw sequential create");
    }));
  const rawDelete =
    scaleUp *
    (await timed(async () => {
      for (const id of seq) expect(await raw("DELETE", `/id/${id}`), 200, "raw sequential delete");
    }));
  // One raw load of the config the creates leave: the same 100 routes appended in one write (Caddy's
  // `/...` appends an array's items), then the routes put back as they were.
  const rawAppend: number[] = [];
  const before = JSON.parse(expect(await raw("GET", routesPath), 200, "raw routes").body) as unknown[];
  for (let round = 0; round < BURSTS; round++) {
    const routes = Array.from({ length: 100 }, (_, i) =>
      benchRoute(`r-load${i}.${round}.${tag}.bench.test`, i),
    );
    rawAppend.push(
      await timed(async () =>
        expect(await raw("POST", `${routesPath}/...`, routes), 200, "raw append of 100"),
      ),
    );
    expect(await raw("PATCH", routesPath, before), 200, "raw routes put back after the append");
  }
  const note = seq.length < 100 ? ` (raw: ${seq.length} calls x${scaleUp.toFixed(1)})` : "";
  const label = (kind: string, runs: { batches: number }[]) => {
    const n = runs.map((r) => r.batches);
    const each = n.every((x) => x === 1) ? "1 batch each" : `batches ${n.join(", ")}`;
    return `100 concurrent ${kind} (wall, median of ${runs.length}, ${each})${note}`;
  };
  const ms = (runs: { ms: number }[]) => runs.map((r) => r.ms);
  return {
    rows: [
      row(label("creates", creates), size, ms(creates), [rawCreate], target, true),
      row(label("deletes", deletes), size, ms(deletes), [rawDelete], target, true),
      row(
        `100 concurrent creates vs one raw write of the same 100 routes (wall, median of ${runs(creates, rawAppend)})`,
        size,
        ms(creates),
        rawAppend,
        BURST_VS_LOAD,
      ),
    ],
    bulk: {
      agentCreate: ms(creates),
      agentDelete: ms(deletes),
      createBatches: creates.map((r) => r.batches),
      deleteBatches: deletes.map((r) => r.batches),
      rawCreate,
      rawDelete,
      rawAppend,
      rawSequentialCalls: seq.length,
    },
  };
}
