/**
 * Keep-alive clients of one route while 100 other routes change through the agent. Every config change
 * Caddy makes closes the replaced config's idle keep-alive connections; a client that sends its next
 * request on one at that moment gets a reset. Three kinds of client, four of each, all sending back to back
 * through route A the whole time:
 *   - HTTP/1.1, Node's http.Agent with keepAlive, no retry (most webhook senders, Node's own clients);
 *   - HTTP/1.1, the same, retrying a GET once when it failed on a reused connection (browsers, Go);
 *   - HTTP/2 over TLS (Caddy's internal issuer), a new session once the old one got GOAWAY, no retry;
 *   - HTTP/1.1 on a new connection for each request, no retry (clients that keep no connection open). A
 *     reload binds a new listening socket beside the old one (SO_REUSEPORT); a connection the kernel queued
 *     on the old socket is reset when Caddy closes it, unless net.ipv4.tcp_migrate_req (printed with the
 *     table) moves it to the new one.
 * Phases: 100 sequential creates, 100 sequential replaces that change nothing, 100 sequential replaces
 * that change only the upstream address, 100 concurrent deletes (one burst, which the writer groups).
 * Run: `npm run build && scripts/node dist/bench/keepalive.js`, or `npm run bench -- --keepalive`.
 * BENCH_KEEPALIVE_ROUTES: routes loaded before (default 1000). BENCH_AGENT_ROOT: a checkout whose built
 * agent to run (to compare with another version).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { projectRoot } from "../src/paths.js";
import {
  admin,
  adminWrites,
  type BenchCaddy,
  routeJson,
  routesPath,
  startAgent,
  startCaddy,
} from "./harness.js";

const ROUTES = Number(process.env.BENCH_KEEPALIVE_ROUTES ?? 1000);
const CLIENTS = 4;
const HOST = "a.keepalive.test";

interface Stats {
  ok: number;
  failed: number;
  retried: number;
  /** Failures by what the client saw. */
  reasons: Record<string, number>;
}
const zero = (): Stats => ({ ok: 0, failed: 0, retried: 0, reasons: {} });
const fail = (s: Stats, err: unknown) => {
  s.failed++;
  const e = err as NodeJS.ErrnoException;
  const why = e.code === "ERR_HTTP2_STREAM_ERROR" || !e.code ? e.message : e.code;
  s.reasons[why] = (s.reasons[why] ?? 0) + 1;
};

type Kind = "h1" | "h1-retry" | "h2" | "h2-retry" | "h1-new";

function h1Get(port: number, agent: http.Agent | false, host = HOST): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: "/", agent, headers: { host } }, (res) => {
      res.resume();
      res.on("end", () => (res.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${res.statusCode}`))));
      res.on("error", reject);
    });
    req.setTimeout(10_000, () => req.destroy(new Error("timeout")));
    req.on("error", (err) => reject(Object.assign(err, { reused: req.reusedSocket })));
  });
}

/**
 * Requests back to back on one kept-alive connection, or on a new connection each (`keepAlive` false, where
 * no failure is on a reused connection, so none is retried).
 */
async function h1Client(
  port: number,
  retry: boolean,
  stats: () => Stats,
  running: () => boolean,
  keepAlive = true,
) {
  const agent = keepAlive ? new http.Agent({ keepAlive: true, maxSockets: 1 }) : false;
  while (running()) {
    try {
      await h1Get(port, agent);
      stats().ok++;
    } catch (err) {
      if (retry && (err as { reused?: boolean }).reused) {
        stats().retried++;
        try {
          await h1Get(port, agent);
          stats().ok++;
        } catch (again) {
          fail(stats(), again);
        }
      } else fail(stats(), err);
    }
  }
  if (agent) agent.destroy();
}

/** A stream the server refused before processing it (RFC 9113 8.7): safe to send again, as browsers do. */
const refused = (err: unknown) => /REFUSED_STREAM|GOAWAY/.test((err as Error).message);

async function h2Client(
  port: number,
  ca: string,
  retry: boolean,
  stats: () => Stats,
  running: () => boolean,
) {
  let session: http2.ClientHttp2Session | undefined;
  const open = () => {
    const s = http2.connect(`https://127.0.0.1:${port}`, { servername: HOST, ca });
    s.on("error", () => undefined);
    // A session that got GOAWAY takes no new streams: the next request opens a new one.
    s.on("goaway", () => {
      if (session === s) session = undefined;
    });
    s.on("close", () => {
      if (session === s) session = undefined;
    });
    return s;
  };
  const once = (s: http2.ClientHttp2Session) =>
    new Promise<void>((resolve, reject) => {
      const req = s.request({ ":path": "/", ":authority": HOST });
      req.setTimeout(10_000, () => req.close(http2.constants.NGHTTP2_CANCEL));
      let status = 0;
      req.on("response", (h) => {
        status = Number(h[":status"]);
      });
      req.on("error", reject);
      req.resume();
      req.on("end", () => (status === 200 ? resolve() : reject(new Error(`HTTP ${status}`))));
      req.on("close", () => reject(new Error("stream closed")));
      req.end();
    });
  const next = () => {
    if (session?.closed || session?.destroyed) session = undefined;
    session ??= open();
    return session;
  };
  while (running()) {
    try {
      await once(next());
      stats().ok++;
    } catch (err) {
      if (retry && refused(err)) {
        stats().retried++;
        try {
          await once(next());
          stats().ok++;
        } catch (again) {
          fail(stats(), again);
        }
      } else fail(stats(), err);
    }
  }
  session?.close();
}

export interface KeepAliveRow {
  phase: string;
  routes: number;
  adminWrites: number;
  results: Record<Kind, Stats>;
}

export async function keepAliveBench(): Promise<KeepAliveRow[]> {
  const dir = mkdtempSync(join(tmpdir(), "hk-bench-ka-"));
  const upstream = http.createServer((_req, res) => res.end("a"));
  // Longer than the run: Caddy's own pooled connections to the upstream are not what is measured.
  upstream.keepAliveTimeout = 600_000;
  await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
  const upPort = (upstream.address() as AddressInfo).port;
  let caddy: BenchCaddy | undefined;
  let stopAgent: () => void = () => undefined;
  try {
    caddy = await startCaddy(dir, "ka", { tlsHost: HOST });
    const c = caddy;
    const base = Array.from({ length: ROUTES }, (_, i) =>
      routeJson(`load${i}.keepalive.test`, "127.0.0.1:9"),
    );
    const loaded = await admin(c, "PATCH", routesPath, base);
    if (loaded.status !== 200) throw new Error(`loading routes: ${loaded.status} ${loaded.body}`);
    const agent = await startAgent(dir, c, { root: process.env.BENCH_AGENT_ROOT ?? projectRoot() });
    stopAgent = agent.stop;
    const call = agent.call;
    const body = (id: string, port: number) => ({ domain: id, upstreams: [{ dial: `127.0.0.1:${port}` }] });
    const expect = async (p: Promise<{ status: number; body: string }>, status: number, what: string) => {
      const r = await p;
      if (r.status !== status) throw new Error(`${what}: ${r.status} ${r.body.slice(0, 300)}`);
    };
    await expect(call("POST", "/v1/proxy/routes", body(HOST, upPort)), 201, "create route A");
    const ca = JSON.parse((await admin(c, "GET", "/pki/ca/local")).body).root_certificate as string;

    const others = Array.from({ length: 100 }, (_, i) => `o${i}.keepalive.test`);
    const phases: [string, () => Promise<unknown>][] = [
      [
        "100 sequential creates",
        async () => {
          for (const id of others) await expect(call("POST", "/v1/proxy/routes", body(id, 9)), 201, "create");
        },
      ],
      [
        "100 sequential replaces that change nothing",
        async () => {
          for (const id of others)
            await expect(call("PUT", `/v1/proxy/routes/${id}`, body(id, 9)), 200, "no-op replace");
        },
      ],
      [
        "100 sequential replaces of the upstream address only",
        async () => {
          for (const id of others)
            await expect(call("PUT", `/v1/proxy/routes/${id}`, body(id, 10)), 200, "upstream replace");
        },
      ],
      [
        "100 concurrent deletes",
        () =>
          Promise.all(others.map((id) => expect(call("DELETE", `/v1/proxy/routes/${id}`), 204, "delete"))),
      ],
    ];

    const rows: KeepAliveRow[] = [];
    for (const [phase, run] of phases) {
      const results: Record<Kind, Stats> = {
        h1: zero(),
        "h1-retry": zero(),
        h2: zero(),
        "h2-retry": zero(),
        "h1-new": zero(),
      };
      let running = true;
      const clients: Promise<void>[] = [];
      for (let i = 0; i < CLIENTS; i++) {
        clients.push(
          h1Client(
            c.httpPort,
            false,
            () => results.h1,
            () => running,
          ),
        );
        clients.push(
          h1Client(
            c.httpPort,
            true,
            () => results["h1-retry"],
            () => running,
          ),
        );
        clients.push(
          h2Client(
            c.tlsPort as number,
            ca,
            false,
            () => results.h2,
            () => running,
          ),
        );
        clients.push(
          h2Client(
            c.tlsPort as number,
            ca,
            true,
            () => results["h2-retry"],
            () => running,
          ),
        );
        clients.push(
          h1Client(
            c.httpPort,
            false,
            () => results["h1-new"],
            () => running,
            false,
          ),
        );
      }
      // Warm: every client has its connection before the changes start.
      await new Promise((r) => setTimeout(r, 500));
      for (const k of Object.keys(results) as Kind[]) results[k] = zero();
      const writesBefore = await adminWrites(c);
      await run();
      const writes = (await adminWrites(c)) - writesBefore;
      running = false;
      await Promise.all(clients);
      rows.push({ phase, routes: ROUTES, adminWrites: writes, results });
    }
    return rows;
  } finally {
    stopAgent();
    caddy?.stop();
    upstream.closeAllConnections();
    upstream.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * What an upstream read from a file costs per request (the operator's switch; considered for every route):
 * four keep-alive clients through a route dialing `{file.<path>}` and through one dialing the same address
 * written in the config, in alternating rounds; the medians, in microseconds of wall time per request.
 */
export async function fileDialCost(
  rounds = 5,
  perClient = 1000,
): Promise<{ literalUs: number; fileUs: number }> {
  const dir = mkdtempSync(join(tmpdir(), "hk-bench-file-"));
  const upstream = http.createServer((_req, res) => res.end("u"));
  upstream.keepAliveTimeout = 600_000;
  await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
  const dial = `127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  const file = join(dir, "upstream");
  writeFileSync(file, dial);
  const caddy = await startCaddy(dir, "file");
  try {
    const routes = [routeJson("literal.file.test", dial), routeJson("file.file.test", `{file.${file}}`)];
    const r = await admin(caddy, "PATCH", routesPath, routes);
    if (r.status !== 200) throw new Error(`loading routes: ${r.status} ${r.body}`);
    const round = async (host: string) => {
      const t0 = process.hrtime.bigint();
      await Promise.all(
        Array.from({ length: CLIENTS }, async () => {
          const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
          for (let i = 0; i < perClient; i++) await h1Get(caddy.httpPort, agent, host);
          agent.destroy();
        }),
      );
      return Number(process.hrtime.bigint() - t0) / 1e3 / (CLIENTS * perClient);
    };
    const literal: number[] = [];
    const fromFile: number[] = [];
    for (let k = 0; k < rounds; k++) {
      literal.push(await round("literal.file.test"));
      fromFile.push(await round("file.file.test"));
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
    return { literalUs: median(literal), fileUs: median(fromFile) };
  } finally {
    caddy.stop();
    upstream.closeAllConnections();
    upstream.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The kernel's setting for connections queued on a closing SO_REUSEPORT socket, in this network namespace. */
function migrateReq(): string {
  try {
    return readFileSync("/proc/sys/net/ipv4/tcp_migrate_req", "utf8").trim();
  } catch {
    return "unknown";
  }
}

export function keepAliveTable(rows: KeepAliveRow[]): string {
  const why = (s: Stats) =>
    Object.entries(s.reasons)
      .map(([k, n]) => `${n} ${k.replace(/^Stream closed with error code /, "")}`)
      .join(", ");
  const cell = (s: Stats, retry = false) =>
    `${s.failed} / ${s.ok + s.failed}${retry ? `, ${s.retried} retried` : ""}${s.failed > 0 ? ` (${why(s)})` : ""}`;
  return [
    `net.ipv4.tcp_migrate_req: ${migrateReq()}`,
    "",
    "| phase (other routes changing) | routes | Caddy config writes | HTTP/1.1 no retry: failed / sent | HTTP/1.1 retrying: failed / sent | HTTP/2 TLS no retry: failed / sent | HTTP/2 TLS retrying refused streams: failed / sent | HTTP/1.1 new connection each: failed / sent |",
    "|---|---|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.phase} | ${r.routes} | ${r.adminWrites} | ${cell(r.results.h1)} | ${cell(r.results["h1-retry"], true)} | ${cell(r.results.h2)} | ${cell(r.results["h2-retry"], true)} | ${cell(r.results["h1-new"])} |`,
    ),
  ].join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  keepAliveBench().then(
    (rows) => {
      console.log(keepAliveTable(rows));
      process.exit(0);
    },
    (err: unknown) => {
      console.error(err);
      process.exit(2);
    },
  );
}
