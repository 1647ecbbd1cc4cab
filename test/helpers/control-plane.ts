import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer as createHttpServer, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  type AgentEvent,
  type ConnectedAgent,
  ControlPlane,
  type ControlPlaneOptions,
  MemoryEnrollment,
} from "../../src/connect/control-plane/index.js";
import { makeTestCa } from "./tls.js";

export interface TestControlPlane {
  cp: ControlPlane;
  enrollment: MemoryEnrollment;
  /** `wss://127.0.0.1:<port>/agents` (or ws:// with `plain`). */
  url: string;
  port: number;
  /** The test CA's PEM file the server's certificate is signed by (for HOSTKEEPER_CONNECT_CA). */
  caFile: string;
  server: Server;
  privateKey: KeyObject;
  /** Events received, in order. */
  events: { agent: string; event: AgentEvent }[];
  /** Settings that connect an agent to this control plane (with a fresh enrollment token). */
  agentEnv(extra?: Record<string, string>): Record<string, string>;
  waitForAgent(): Promise<ConnectedAgent>;
  close(): Promise<void>;
}

/**
 * A control plane of the library (src/connect/control-plane) on an HTTPS server on loopback, its certificate
 * from a throw-away CA; stopped when the test ends. `plain`: plain HTTP (for a TLS-terminating proxy in front).
 */
export async function startControlPlane(
  t: { after: (fn: () => unknown) => void },
  opts: Partial<ControlPlaneOptions> & { plain?: boolean; port?: number; privateKey?: KeyObject } = {},
): Promise<TestControlPlane> {
  const dir = mkdtempSync(join(tmpdir(), "hk-cp-"));
  const ca = makeTestCa(dir);
  const privateKey = opts.privateKey ?? generateKeyPairSync("ed25519").privateKey;
  const enrollment = (opts.enrollment as MemoryEnrollment | undefined) ?? new MemoryEnrollment();
  const events: TestControlPlane["events"] = [];
  const cp = new ControlPlane({
    ...opts,
    privateKey,
    enrollment,
    onEvent: async (agent, event) => {
      events.push({ agent: agent.fingerprint, event });
      return (await opts.onEvent?.(agent, event)) ?? 200;
    },
  });
  const server: Server = opts.plain
    ? createHttpServer()
    : (createHttpsServer({ key: ca.key, cert: ca.cert }) as unknown as Server);
  cp.attach(server, "/agents");
  await new Promise<void>((resolve) => server.listen(opts.port ?? 0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  const url = `${opts.plain ? "ws" : "wss"}://127.0.0.1:${port}/agents`;
  let firstAgent: Promise<ConnectedAgent> | undefined;
  const close = async () => {
    await cp.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(dir, { recursive: true, force: true });
  };
  t.after(close);
  return {
    cp,
    enrollment,
    url,
    port,
    caFile: ca.caFile,
    server,
    privateKey,
    events,
    agentEnv: (extra = {}) => ({
      HOSTKEEPER_CONNECT_URL: url,
      HOSTKEEPER_CONNECT_KEYS: cp.publicKey,
      ...(opts.plain ? {} : { HOSTKEEPER_CONNECT_CA: ca.caFile }),
      HOSTKEEPER_ENROLL_TOKEN: enrollment.issue(),
      ...extra,
    }),
    waitForAgent: () => {
      firstAgent ??= new Promise((resolve) => {
        const now = [...cp.agents.values()][0];
        if (now) return resolve(now);
        const check = setInterval(() => {
          const a = [...cp.agents.values()][0];
          if (a) {
            clearInterval(check);
            resolve(a);
          }
        }, 10);
      });
      return firstAgent;
    },
    close,
  };
}
