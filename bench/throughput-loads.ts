/**
 * The loads of the concurrent-changes benchmark (bench/throughput.ts): what the clients send, the routes
 * Caddy holds before the agent starts, and what runs beside the agent (a callback receiver).
 * - `ownRoutes`: at the largest size, each client creates a route of its own and deletes it again, where
 *   Caddy's reload of 20,000 routes sets the pace;
 * - `smallHostMix`: a small host, about 300 routes, where the agent's own cost per change shows: each client
 *   creates, replaces and deletes routes among a shared set of ids, with a callback URL on every change that a
 *   receiver on loopback answers with 204.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { RouteJson } from "../src/caddy/routes/plan.js";
import { buildRoute } from "../src/proxy/route/build-route.js";
import { benchRoute, TOKEN, UPSTREAM, writeBody } from "./harness.js";

/** What a run counts while it measures: every change answered as expected, and the others by what they got. */
export class Tally {
  measuring = false;
  stopped = false;
  readonly latencies: number[] = [];
  readonly failedBy: Record<string, number> = {};
  failures = 0;

  /** One change's answer (undefined: the request itself failed), counted only while measuring. */
  record(what: string, want: number, r: { status: number; ms: number } | undefined): void {
    if (!this.measuring) return;
    if (r?.status === want) {
      this.latencies.push(r.ms);
      return;
    }
    const key = `${what} ${r?.status ?? "error"}`;
    this.failedBy[key] = (this.failedBy[key] ?? 0) + 1;
    this.failures++;
  }
}

/** A load started for one run: its clients, and what it counted besides the changes. */
export interface StartedLoad {
  client(n: number, port: number, keepAlive: http.Agent, tally: Tally): Promise<void>;
  /** Callbacks received while measuring, when the load sends any. */
  callbacks(): number | undefined;
  stop(): Promise<void>;
}

export interface ThroughputLoad {
  /** Its name in `BENCH_THROUGHPUT_LOADS`: `small` or `large`. */
  key: string;
  /** How the report names it. */
  title: string;
  /** Routes Caddy holds when the agent starts (about as many as it holds throughout). */
  routes: number;
  seconds: number;
  /** The routes loaded raw into Caddy before the agent starts. */
  base(): RouteJson[];
  start(tally: Tally): Promise<StartedLoad>;
}

/** One change on a keep-alive connection; its status and how long it took (undefined: the request failed). */
export function change(
  port: number,
  agent: http.Agent,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; ms: number } | undefined> {
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
  }).catch(() => undefined);
}

/** 200 clients each creating a route of its own and deleting it again, at `routes` routes. */
export function ownRoutes(routes: number, seconds: number): ThroughputLoad {
  return {
    key: "large",
    title: `creating and deleting routes of their own at ${routes} routes`,
    routes,
    seconds,
    base: () => Array.from({ length: routes }, (_, i) => benchRoute(`tp${i}.bench.test`, i)),
    start: async () => ({
      callbacks: () => undefined,
      stop: async () => {},
      client: async (n, port, keepAlive, tally) => {
        for (let i = 0; !tally.stopped; i++) {
          const id = `t${n}-${i}.tp.bench.test`;
          tally.record(
            "create",
            201,
            await change(port, keepAlive, "POST", "/v1/proxy/routes", writeBody(id)),
          );
          tally.record("delete", 204, await change(port, keepAlive, "DELETE", `/v1/proxy/routes/${id}`));
        }
      },
    }),
  };
}

/** The small host's shape: routes no client touches, the ids the clients share, and how many start present. */
export const SMALL_HOST = { fixed: 100, ids: 300, present: 200 };

const mixId = (i: number) => `m${i}.mix.bench.test`;
/** The upstream of a route's `version`-th write: alternating, so a replace always changes the route. */
const dialOf = (version: number) => (version % 2 === 0 ? UPSTREAM : "127.0.0.1:10");
const mixBody = (id: string, version: number, callbackUrl: string) => ({
  domain: id,
  upstreams: [{ dial: dialOf(version) }],
  callback_url: callbackUrl,
});

/**
 * A loopback receiver of callbacks that answers every POST with 204 once it has read the body, counting
 * those that arrive while the tally measures.
 */
async function callbackReceiver(
  tally: Tally,
): Promise<{ url: string; received(): number; stop(): Promise<void> }> {
  let received = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (tally.measuring) received++;
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    received: () => received,
    stop: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * A small host: `SMALL_HOST.fixed` routes no client touches and `SMALL_HOST.ids` ids the 200 clients share,
 * about two thirds of them present at any time (about 300 routes in all). Each client takes an id no other
 * client holds, changes it and gives it back: an absent id is created, a present one replaced (its upstream
 * changes) or deleted, one chance in two each, so creates, replaces and deletes come in about equal numbers
 * and every change is one the agent must write. Every change names the receiver as its callback URL.
 */
export function smallHostMix(seconds: number): ThroughputLoad {
  const { fixed, ids, present } = SMALL_HOST;
  return {
    key: "small",
    title: `creating, replacing and deleting routes among ${ids} ids at about ${fixed + present} routes, a callback on every change`,
    routes: fixed + present,
    seconds,
    base: () => [
      ...Array.from({ length: fixed }, (_, i) => benchRoute(`tp${i}.bench.test`, i)),
      ...Array.from({ length: present }, (_, i) => buildRoute(writeBody(mixId(i))).route),
    ],
    start: async (tally) => {
      const receiver = await callbackReceiver(tally);
      // Per id: whether Caddy holds it, and how often it was written since its create.
      const version: (number | undefined)[] = Array.from({ length: ids }, (_, i) =>
        i < present ? 0 : undefined,
      );
      const free = Array.from({ length: ids }, (_, i) => i);
      const one = async (port: number, keepAlive: http.Agent) => {
        const i = free.splice(Math.floor(Math.random() * free.length), 1)[0] as number;
        const id = mixId(i);
        const v = version[i];
        if (v === undefined) {
          const r = await change(port, keepAlive, "POST", "/v1/proxy/routes", mixBody(id, 0, receiver.url));
          tally.record("create", 201, r);
          // A create that met the route (after a change that failed but applied) knows it is there now.
          if (r?.status === 201 || r?.status === 409) version[i] = 0;
        } else if (Math.random() < 0.5) {
          const r = await change(
            port,
            keepAlive,
            "PUT",
            `/v1/proxy/routes/${id}`,
            mixBody(id, v + 1, receiver.url),
          );
          tally.record("replace", 200, r);
          if (r?.status === 200) version[i] = v + 1;
          else if (r?.status === 404) version[i] = undefined;
        } else {
          const r = await change(port, keepAlive, "DELETE", `/v1/proxy/routes/${id}`, {
            callback_url: receiver.url,
          });
          tally.record("delete", 204, r);
          if (r?.status === 204 || r?.status === 404) version[i] = undefined;
        }
        free.push(i);
      };
      return {
        callbacks: () => receiver.received(),
        stop: () => receiver.stop(),
        client: async (_n, port, keepAlive) => {
          while (!tally.stopped) await one(port, keepAlive);
        },
      };
    },
  };
}
