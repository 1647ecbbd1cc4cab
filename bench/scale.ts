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
  bulk: Record<string, number>;
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
  const bulk: Record<string, number> = {};

  // Load the routes with one raw write (the fastest way there), then measure at that size.
  // A tenth of the routes carry site policies (redirect host, path, basic auth, headers, compression).
  const base = Array.from({ length: size }, (_, i) => benchRoute(`load${i}.s${size}.bench.test`, i));
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
    // The batches the agent's writer took to Caddy so far (its batch-size histogram): one per burst is the aim.
    const batches = async () =>
      metricSample(
        expect(await agent.call("GET", "/metrics"), 200, "agent metrics").body,
        "hostkeeper_route_write_batch_size_count",
      );
    const ids = Array.from({ length: 100 }, (_, i) => `burst${i}.${tag}.bench.test`);
    const beforeCreates = await batches();
    const agentCreate = await timed(() =>
      Promise.all(
        ids.map(async (id, i) =>
          expect(
            await agent.call("POST", "/v1/proxy/routes", benchBody(`a-${id}`, i)),
            201,
            "agent burst create",
          ),
        ),
      ),
    );
    const createBatches = (await batches()) - beforeCreates;
    const beforeDeletes = await batches();
    const agentDelete = await timed(() =>
      Promise.all(
        ids.map(async (id) =>
          expect(await agent.call("DELETE", `/v1/proxy/routes/a-${id}`), 204, "agent burst delete"),
        ),
      ),
    );
    const deleteBatches = (await batches()) - beforeDeletes;
    // Sequential raw calls cost the same each (0.5% more or fewer routes): fewer than 100 are scaled up.
    const seq = ids.slice(0, opts.sequential);
    const scaleUp = ids.length / seq.length;
    const rawCreate =
      scaleUp *
      (await timed(async () => {
        for (const [i, id] of seq.entries())
          expect(await raw("POST", routesPath, benchRoute(`r-${id}`, i)), 200, "raw sequential create");
      }));
    const rawDelete =
      scaleUp *
      (await timed(async () => {
        for (const id of seq) expect(await raw("DELETE", `/id/r-${id}`), 200, "raw sequential delete");
      }));
    const note = seq.length < ids.length ? ` (raw: ${seq.length} calls x${scaleUp.toFixed(1)})` : "";
    const inBatches = (n: number) => `${n} batch${n === 1 ? "" : "es"}`;
    rows.push(
      row(
        `100 concurrent creates (wall, ${inBatches(createBatches)})${note}`,
        size,
        [agentCreate],
        [rawCreate],
        targets.burst,
        true,
      ),
    );
    rows.push(
      row(
        `100 concurrent deletes (wall, ${inBatches(deleteBatches)})${note}`,
        size,
        [agentDelete],
        [rawDelete],
        targets.burst,
        true,
      ),
    );
    Object.assign(bulk, {
      agentCreate,
      agentDelete,
      createBatches,
      deleteBatches,
      rawCreate,
      rawDelete,
      rawSequentialCalls: seq.length,
    });
  }

  // The agent has read, changed and listed these routes: its memory just after, and once idle.
  await sleep(5000);
  const afterWorkRssMb = rssMb(agent.child.pid as number);
  await sleep(IDLE_MS - 5000);
  const idleRssMb = rssMb(agent.child.pid as number);

  expect(await raw("PATCH", routesPath, []), 200, "clear routes (raw)");
  expect(await direct("PATCH", routesPath, []), 200, "clear routes (agent)");
  return { rows, bulk, idleRssMb, afterWorkRssMb };
}
