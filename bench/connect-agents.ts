/**
 * The two children of `npm run bench -- --connect`'s control-plane part (bench/connect.ts), each driven by
 * the benchmark over IPC, so that the control plane's process holds nothing but the library and its agents:
 *
 * - `control-plane`: one process of the library (src/connect/control-plane) on an HTTPS server on loopback
 *   (plain HTTP with BENCH_CONNECT_CP_SCHEME=ws), reporting its memory (after a full collection) as agents
 *   connect, and timing requests sent across them;
 * - `agents`: simulated agents that speak the protocol (src/connect/protocol.ts): each dials, proves its key
 *   in the handshake, pings every HEARTBEAT_MS as the agent does, and answers each `req` frame with a small
 *   fixed `res`, one `data` and `end`.
 */
import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import type { IncomingMessage } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import WebSocket from "ws";
import type { ConnectedAgent } from "../src/connect/control-plane/index.js";
import {
  channelBinding,
  decodeMessage,
  encodeFrame,
  fingerprintOf,
  HEARTBEAT_MS,
  newNonce,
  publicKeyBase64,
  publicKeyFromBase64,
  SUBPROTOCOL,
  signTranscript,
  transcript,
  verifyTranscript,
} from "../src/connect/protocol.js";
import { startControlPlane } from "../test/helpers/control-plane.js";
import { quantile } from "./harness.js";

/** What the control-plane child reports of its own memory (MB). */
export interface CpMemory {
  rssMb: number;
  heapUsedMb: number;
  externalMb: number;
  arrayBuffersMb: number;
  agents: number;
}

export interface LatencySummary {
  requests: number;
  concurrency: number;
  failed: number;
  p50: number;
  p99: number;
  max: number;
  wallMs: number;
}

/** Messages from the benchmark to a child, and the child's answers (one answer per message). */
export type ToChild =
  | { cmd: "start"; scheme: "ws" | "wss" }
  | { cmd: "enroll"; fingerprints: string[] }
  | { cmd: "memory"; agents: number }
  | { cmd: "requests"; count: number; concurrency: number }
  | { cmd: "keys"; count: number }
  | {
      cmd: "connect";
      url: string;
      caFile: string | undefined;
      controlPlaneKey: string;
      /** How many more agents to connect (the next ones not connected yet), and how many handshakes at once. */
      count: number;
      concurrency: number;
    }
  | { cmd: "limits" }
  | { cmd: "stop" };

/** The simulated agent's answer to every request: about the size of one route's JSON. */
const ANSWER = Buffer.from(
  JSON.stringify({
    "@id": "app.example.com",
    match: [{ host: ["app.example.com"] }],
    handle: [
      {
        handler: "reverse_proxy",
        upstreams: [{ dial: "127.0.0.1:3000" }],
        load_balancing: { selection_policy: { policy: "first" } },
        stream_close_delay: "2m",
      },
    ],
    terminal: true,
  }),
);
const ANSWER_HEADERS = {
  "content-type": "application/json; charset=utf-8",
  "content-length": String(ANSWER.length),
};

const mb = (bytes: number) => bytes / 2 ** 20;

/** The soft limit on open files of this process (`Max open files` in /proc/self/limits). */
export function openFilesLimit(pid: number | "self" = "self"): number {
  const m = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync(`/proc/${pid}/limits`, "utf8"));
  return m?.[1] === "unlimited" ? Number.POSITIVE_INFINITY : Number(m?.[1] ?? Number.NaN);
}

// ----- the control plane's child

async function controlPlaneChild(): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error("the control plane's child needs --expose-gc");
  const cleanups: (() => unknown)[] = [];
  let cp: Awaited<ReturnType<typeof startControlPlane>> | undefined;
  const enrolled = new Set<string>();
  const memory = async (agents: number): Promise<CpMemory> => {
    // Two full collections a moment apart, so what is measured is what the connections hold.
    for (let i = 0; i < 3; i++) {
      gc();
      await sleep(200);
    }
    const m = process.memoryUsage();
    return {
      rssMb: mb(m.rss),
      heapUsedMb: mb(m.heapUsed),
      externalMb: mb(m.external),
      arrayBuffersMb: mb(m.arrayBuffers),
      agents,
    };
  };
  const handle = async (msg: ToChild): Promise<unknown> => {
    switch (msg.cmd) {
      case "start": {
        cp = await startControlPlane(
          { after: (fn) => cleanups.push(fn) },
          {
            plain: msg.scheme === "ws",
            // The platform's record of its agents: here every key the benchmark enrolled.
            enrollment: {
              isEnrolled: (a) => enrolled.has(a.fingerprint),
              enroll: () => false,
            },
          },
        );
        return { url: cp.url, caFile: msg.scheme === "wss" ? cp.caFile : undefined, key: cp.cp.publicKey };
      }
      case "enroll":
        for (const f of msg.fingerprints) enrolled.add(f);
        return { enrolled: enrolled.size };
      case "memory": {
        const c = cp?.cp;
        if (c === undefined) throw new Error("not started");
        const end = Date.now() + 60_000;
        while (c.agents.size < msg.agents) {
          if (Date.now() > end) throw new Error(`${c.agents.size} of ${msg.agents} agents connected`);
          await sleep(100);
        }
        return await memory(c.agents.size);
      }
      case "requests": {
        const c = cp?.cp;
        if (c === undefined) throw new Error("not started");
        return await requests([...c.agents.values()], msg.count, msg.concurrency);
      }
      case "limits":
        return { openFiles: openFilesLimit() };
      case "stop":
        for (const fn of cleanups.splice(0)) await fn();
        return { stopped: true };
      default:
        throw new Error(`the control plane's child has no ${msg.cmd}`);
    }
  };
  serve(handle);
}

/** `count` requests round-robin across `agents`, `concurrency` in flight: each timed to the end of its body. */
async function requests(
  agents: ConnectedAgent[],
  count: number,
  concurrency: number,
): Promise<LatencySummary> {
  const ms: number[] = [];
  let failed = 0;
  let next = 0;
  const t0 = performance.now();
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= count) return;
      const agent = agents[i % agents.length] as ConnectedAgent;
      const start = performance.now();
      try {
        const res = await agent.fetch("/v1/proxy/routes/app.example.com");
        const body = await res.arrayBuffer();
        if (res.status !== 200 || body.byteLength !== ANSWER.length) failed++;
        else ms.push(performance.now() - start);
      } catch {
        failed++;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return {
    requests: count,
    concurrency,
    failed,
    p50: quantile(ms, 0.5),
    p99: quantile(ms, 0.99),
    max: quantile(ms, 1),
    wallMs: performance.now() - t0,
  };
}

// ----- the simulated agents' child

interface SimAgent {
  privateKey: KeyObject;
  publicKey: string;
  ws?: WebSocket;
}

async function agentsChild(): Promise<void> {
  const agents: SimAgent[] = [];
  const handle = async (msg: ToChild): Promise<unknown> => {
    switch (msg.cmd) {
      case "keys": {
        for (let i = 0; i < msg.count; i++) {
          const { privateKey } = generateKeyPairSync("ed25519");
          agents.push({ privateKey, publicKey: publicKeyBase64(privateKey) });
        }
        return { fingerprints: agents.map((a) => fingerprintOf(a.publicKey)) };
      }
      case "connect": {
        const ca = msg.caFile === undefined ? undefined : readFileSync(msg.caFile, "utf8");
        const t0 = performance.now();
        const todo = agents.filter((a) => a.ws === undefined).slice(0, msg.count);
        let next = 0;
        const failures: string[] = [];
        const worker = async () => {
          for (;;) {
            const a = todo[next++];
            if (a === undefined) return;
            try {
              a.ws = await dial(a, msg.url, ca, msg.controlPlaneKey);
            } catch (err) {
              failures.push((err as Error).message);
            }
          }
        };
        await Promise.all(Array.from({ length: msg.concurrency }, worker));
        return {
          connected: todo.length - failures.length,
          failed: failures.length,
          firstFailure: failures[0],
          ms: performance.now() - t0,
        };
      }
      case "limits":
        return { openFiles: openFilesLimit() };
      case "stop":
        for (const a of agents) a.ws?.terminate();
        return { stopped: true };
      default:
        throw new Error(`the agents' child has no ${msg.cmd}`);
    }
  };
  serve(handle);
}

/** One simulated agent: the handshake (docs/connect.md), then answers to requests; resolves once welcomed. */
function dial(a: SimAgent, url: string, ca: string | undefined, controlPlaneKey: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, SUBPROTOCOL, {
      ...(ca ? { ca } : {}),
      perMessageDeflate: false,
      maxPayload: 16 * 1024 * 1024,
      handshakeTimeout: 30_000,
    });
    const nonce = newNonce();
    let binding = "";
    let phase: "challenge" | "welcome" | "open" = "challenge";
    const pinned = publicKeyFromBase64(controlPlaneKey);
    const fail = (why: string) => {
      ws.terminate();
      reject(new Error(why));
    };
    ws.once("upgrade", (res: IncomingMessage) => {
      binding = channelBinding(res.socket);
    });
    ws.once("open", () => {
      ws.send(
        encodeFrame({ t: "hello", v: 1, key: a.publicKey, nonce, binding, agent_version: "bench-simulated" }),
      );
    });
    ws.on("error", (err) => fail(err.message));
    ws.on("close", (code) => {
      if (phase !== "open") fail(`closed during the handshake (${code})`);
    });
    ws.on("message", (data) => {
      const { header } = decodeMessage(data as Buffer);
      if (phase === "open") {
        if (header.t !== "req") return;
        ws.send(encodeFrame({ t: "res", id: header.id, status: 200, headers: ANSWER_HEADERS }));
        ws.send(encodeFrame({ t: "data", id: header.id }, ANSWER));
        ws.send(encodeFrame({ t: "end", id: header.id }));
        return;
      }
      if (phase === "challenge") {
        if (header.t !== "challenge") return fail(`expected a challenge, got ${header.t}`);
        if (header.key !== controlPlaneKey) return fail("the control plane's key is not the pinned one");
        const t = {
          agentKey: a.publicKey,
          controlPlaneKey: header.key,
          agentNonce: nonce,
          controlPlaneNonce: header.nonce,
          binding,
        };
        if (!verifyTranscript(pinned, transcript("control-plane", t), header.sig))
          return fail("the control plane's signature does not verify");
        phase = "welcome";
        ws.send(encodeFrame({ t: "auth", sig: signTranscript(a.privateKey, transcript("agent", t)) }));
        return;
      }
      if (header.t !== "welcome") return fail(`expected welcome, got ${header.t}: ${JSON.stringify(header)}`);
      phase = "open";
      // The agent's heartbeat: a ping every HEARTBEAT_MS, each agent at its own phase.
      setTimeout(() => {
        ws.ping();
        const beat = setInterval(() => ws.ping(), HEARTBEAT_MS);
        ws.once("close", () => clearInterval(beat));
      }, Math.random() * HEARTBEAT_MS);
      resolve(ws);
    });
  });
}

// ----- IPC

/** Answers each message from the benchmark, in order: `{ ok, value }` or `{ ok: false, error }`. */
function serve(handle: (msg: ToChild) => Promise<unknown>): void {
  let chain = Promise.resolve();
  process.on("message", (msg: ToChild) => {
    chain = chain.then(async () => {
      try {
        process.send?.({ ok: true, value: await handle(msg) });
      } catch (err) {
        process.send?.({ ok: false, error: (err as Error).stack ?? String(err) });
      }
      if (msg.cmd === "stop") process.disconnect();
    });
  });
  // Gone with the benchmark: a child whose parent died does not linger.
  process.on("disconnect", () => process.exit(0));
}

const role = process.argv[2];
if (role === "control-plane") void controlPlaneChild();
else if (role === "agents") void agentsChild();
