/**
 * Loopback plumbing the test suite and the benchmark both use: free ports for the processes they start, and
 * plain JSON requests to a local server. Never shipped: the agent itself has no use for it.
 */
import { readFileSync } from "node:fs";
import http from "node:http";
import { createServer } from "node:net";

/** Below the kernel's ephemeral range, so no server listening on port 0 can be handed it meanwhile. */
function fixedPortRange(): [number, number] {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    if (low > 12_000) return [10_000, low];
  } catch {
    // not Linux: fall through
  }
  return [20_000, 32_000];
}

/**
 * A free loopback TCP port for a process the test starts next (Caddy, an operator instance): picked at
 * random outside the ephemeral range and checked by binding it. A port from `listen(0)` would be in that
 * range, where another test's server listening on port 0 could take it before our process binds it.
 */
export async function freePort(): Promise<number> {
  const [low, high] = fixedPortRange();
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low));
    const free = await new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once("error", () => resolve(false));
      s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error("no free port found");
}

/** A JSON request to a loopback port on a fresh connection; resolves with status and body text. */
export function httpRequest(
  port: number,
  method: string,
  path: string,
  opts: { body?: unknown; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        method,
        path,
        agent: false,
        headers: {
          ...opts.headers,
          ...(payload === undefined
            ? {}
            : { "content-type": "application/json", "content-length": String(Buffer.byteLength(payload)) }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      },
    );
    req.on("error", reject);
    req.end(payload);
  });
}
