/**
 * Benchmark: the agent against the minimal raw Caddy admin-API calls that achieve the same, in one run.
 * The agent drives one real Caddy and the raw calls a twin Caddy holding the same routes: in production the
 * agent is the only writer of its Caddy, and raw writes interleaved on the same instance would make every
 * agent write start from a stale ETag. Rounds alternate agent and raw so drift in the machine's load hits
 * both. Prints a table of medians, p95 and ratios against the targets, and writes JSON to bench/results/.
 * Run: `npm run bench` (after `bash scripts/install.sh`).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { projectRoot } from "../src/paths.js";
import { fetchedCaddyBinary } from "../src/proxy/settings.js";
import { freePort, httpRequest } from "../support/loopback.js";
import { connectionBenches } from "./connections.js";

const TOKEN = "bench-token-0123456789abcdef";
const SIZES = (process.env.BENCH_SIZES ?? "1000,5000").split(",").map(Number);
/** Rounds of single changes at 1,000 routes; larger sizes take fewer (each change costs more there). */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 40);
const UPSTREAM = "127.0.0.1:9";

type Res = Awaited<ReturnType<typeof httpRequest>>;

const call = (
  port: number,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
) => httpRequest(port, method, path, { body, headers });

const expect = (r: Res, status: number, what: string) => {
  if (r.status !== status)
    throw new Error(`${what}: expected ${status}, got ${r.status}: ${r.body.slice(0, 300)}`);
  return r;
};

const routeJson = (id: string) => ({
  "@id": id,
  match: [{ host: [id] }],
  handle: [
    {
      handler: "reverse_proxy",
      upstreams: [{ dial: UPSTREAM }],
      load_balancing: { selection_policy: { policy: "first" } },
    },
  ],
  terminal: true,
});
const writeBody = (id: string) => ({ domain: id, upstreams: [{ dial: UPSTREAM }] });

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] ?? Number.NaN;
};

const rssMb = (pid: number) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : Number.NaN;
};

async function waitHttp(port: number, path: string, child: ChildProcess) {
  const end = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${path}: process exited`);
    try {
      if ((await call(port, "GET", path)).status === 200) return;
    } catch {
      // not yet
    }
    if (Date.now() > end) throw new Error(`${path} did not come up`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface Row {
  name: string;
  routes: number;
  agent: { median: number; p95: number };
  raw: { median: number; p95: number };
  ratio: number;
  target: string;
  met: boolean;
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), "hk-bench-"));
  const startCaddy = async (name: string) => {
    const adminPort = await freePort();
    const httpPort = await freePort();
    const cfg = join(dir, `${name}.json`);
    writeFileSync(
      cfg,
      JSON.stringify({
        admin: { listen: `127.0.0.1:${adminPort}`, config: { persist: false } },
        apps: {
          http: {
            servers: {
              srv0: { listen: [`127.0.0.1:${httpPort}`], automatic_https: { disable: true }, routes: [] },
            },
          },
        },
      }),
    );
    const child = spawn(fetchedCaddyBinary, ["run", "--config", cfg], {
      stdio: "ignore",
      env: {
        ...process.env,
        XDG_CONFIG_HOME: join(dir, name, "cfg"),
        XDG_DATA_HOME: join(dir, name, "data"),
        HOME: dir,
      },
    });
    return { adminPort, child };
  };
  const caddy = await startCaddy("agent-caddy");
  const rawCaddy = await startCaddy("raw-caddy");
  const adminPort = rawCaddy.adminPort;
  const agentPort = await freePort();
  // The agent runs exactly as `npm start` runs it: scripts/start, on the pinned Node with the same flags.
  const pkg = JSON.parse(readFileSync(join(projectRoot(), "package.json"), "utf8")) as {
    scripts: { start: string };
  };
  const agent = spawn("sh", ["-c", `exec ${pkg.scripts.start}`], {
    cwd: projectRoot(),
    stdio: "ignore",
    env: {
      PATH: process.env.PATH,
      HOSTKEEPER_LISTEN: `127.0.0.1:${agentPort}`,
      HOSTKEEPER_DATA_DIR: join(dir, "agent"),
      HOSTKEEPER_TOKEN: TOKEN,
      HOSTKEEPER_CADDY_ADMIN: `http://127.0.0.1:${caddy.adminPort}`,
      HOSTKEEPER_LOG_LEVEL: "warn",
    },
  });
  const stop = () => {
    for (const c of [agent, caddy.child, rawCaddy.child])
      if (c.pid && c.exitCode === null) process.kill(c.pid, "SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  };
  process.on("exit", stop);
  await waitHttp(caddy.adminPort, "/config/", caddy.child);
  await waitHttp(rawCaddy.adminPort, "/config/", rawCaddy.child);
  await waitHttp(agentPort, "/healthz", agent);
  await new Promise((r) => setTimeout(r, 1000));
  const auth = { authorization: `Bearer ${TOKEN}` };
  const agentCall = (method: string, path: string, body?: unknown) =>
    call(agentPort, method, path, body, auth);
  const raw = (method: string, path: string, body?: unknown) => call(adminPort, method, path, body);
  const agentsCaddy = (method: string, path: string, body?: unknown) =>
    call(caddy.adminPort, method, path, body);
  const routesPath = "/config/apps/http/servers/srv0/routes";
  // Warm both paths once.
  await agentCall("GET", "/v1/proxy/routes");
  const rssIdle = rssMb(agent.pid as number);

  const rows: Row[] = [];
  const bulk: Record<string, unknown>[] = [];
  const add = (
    name: string,
    routes: number,
    a: number[],
    r: number[],
    target: number,
    higherIsBetter = false,
  ) => {
    const am = quantile(a, 0.5);
    const rm = quantile(r, 0.5);
    const ratio = higherIsBetter ? rm / am : am / rm;
    rows.push({
      name,
      routes,
      agent: { median: am, p95: quantile(a, 0.95) },
      raw: { median: rm, p95: quantile(r, 0.95) },
      ratio,
      target: higherIsBetter ? `>= ${target}x faster` : `<= ${target}`,
      met: higherIsBetter ? ratio >= target : ratio <= target,
    });
  };

  let seq = 0;
  for (const size of SIZES) {
    // Load the routes with one raw write (the fastest way there), then measure at that size.
    const base = Array.from({ length: size }, (_, i) => routeJson(`load${i}.s${size}.bench.test`));
    expect(await raw("PATCH", routesPath, base), 200, "load routes (raw)");
    expect(await agentsCaddy("PATCH", routesPath, base), 200, "load routes (agent)");
    const ca: number[] = [];
    const cr: number[] = [];
    const ra: number[] = [];
    const rr: number[] = [];
    const da: number[] = [];
    const dr: number[] = [];
    const rounds = size >= 5000 ? Math.max(5, Math.round(ROUNDS / 2)) : ROUNDS;
    for (let i = 0; i < rounds; i++) {
      const a = `a${seq}.bench.test`;
      const r = `r${seq++}.bench.test`;
      // Interleaved, so drift in the machine's load hits both sides alike.
      ca.push(
        await timed(async () =>
          expect(await agentCall("POST", "/v1/proxy/routes", writeBody(a)), 201, "agent create"),
        ),
      );
      cr.push(
        await timed(async () => expect(await raw("POST", routesPath, routeJson(r)), 200, "raw create")),
      );
      ra.push(
        await timed(async () =>
          expect(
            await agentCall("PUT", `/v1/proxy/routes/${a}`, { ...writeBody(a), terminal: false }),
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
          expect(await agentCall("DELETE", `/v1/proxy/routes/${a}`), 204, "agent delete"),
        ),
      );
      dr.push(await timed(async () => expect(await raw("DELETE", `/id/${r}`), 200, "raw delete")));
    }
    add("create", size, ca, cr, 1.15);
    add("replace", size, ra, rr, 1.15);
    add("delete", size, da, dr, 1.15);

    if (size === SIZES[SIZES.length - 1]) {
      const ga: number[] = [];
      const gr: number[] = [];
      for (let i = 0; i < 20; i++) {
        ga.push(
          await timed(async () => expect(await agentCall("GET", "/v1/proxy/routes"), 200, "agent list")),
        );
        gr.push(await timed(async () => expect(await raw("GET", routesPath), 200, "raw list")));
      }
      add("list routes", size, ga, gr, 1.5);

      const ids = Array.from({ length: 100 }, (_, i) => `burst${i}.bench.test`);
      const agentCreate = await timed(() =>
        Promise.all(
          ids.map(async (id) =>
            expect(
              await agentCall("POST", "/v1/proxy/routes", writeBody(`a-${id}`)),
              201,
              "agent burst create",
            ),
          ),
        ),
      );
      const agentDelete = await timed(() =>
        Promise.all(
          ids.map(async (id) =>
            expect(await agentCall("DELETE", `/v1/proxy/routes/a-${id}`), 204, "agent burst delete"),
          ),
        ),
      );
      const rawCreate = await timed(async () => {
        for (const id of ids)
          expect(await raw("POST", routesPath, routeJson(`r-${id}`)), 200, "raw sequential create");
      });
      const rawDelete = await timed(async () => {
        for (const id of ids) expect(await raw("DELETE", `/id/r-${id}`), 200, "raw sequential delete");
      });
      add("100 concurrent creates (wall)", size, [agentCreate], [rawCreate], 20, true);
      add("100 concurrent deletes (wall)", size, [agentDelete], [rawDelete], 20, true);
      bulk.push({ agentCreate, agentDelete, rawCreate, rawDelete });
    }
    expect(await raw("PATCH", routesPath, []), 200, "clear routes (raw)");
    expect(await agentsCaddy("PATCH", routesPath, []), 200, "clear routes (agent)");
  }
  const rssEnd = rssMb(agent.pid as number);

  const f = (n: number) => (n >= 100 ? n.toFixed(0) : n.toFixed(1));
  const lines = [
    "| operation | routes | agent median ms | agent p95 ms | raw median ms | raw p95 ms | ratio | target | met |",
    "|---|---|---|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.name} | ${r.routes} | ${f(r.agent.median)} | ${f(r.agent.p95)} | ${f(r.raw.median)} | ${f(r.raw.p95)} | ${r.ratio.toFixed(2)} | ${r.target} | ${r.met ? "yes" : "NO"} |`,
    ),
    "",
    `agent resident memory: idle ${rssIdle.toFixed(1)} MB (target < 80 MB: ${rssIdle < 80 ? "yes" : "NO"}), end of run ${rssEnd.toFixed(1)} MB`,
  ];
  console.log(lines.join("\n"));
  const outDir = join(projectRoot(), "bench", "results");
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, `bench-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  writeFileSync(
    file,
    JSON.stringify(
      { at: new Date().toISOString(), sizes: SIZES, rows, bulk, rss: { idleMb: rssIdle, endMb: rssEnd } },
      null,
      2,
    ),
  );
  console.log(`\nJSON: ${file}`);
  stop();
  process.exit(rows.every((r) => r.met) && rssIdle < 80 ? 0 : 1);
}

// `--keepalive` / `--streams`: the connection benchmarks (bench/connections.ts) instead of this one.
connectionBenches(process.argv.slice(2))
  .then((code) => (code === undefined ? main() : process.exit(code)))
  .catch((err: unknown) => {
    console.error(err);
    process.exit(2);
  });
