import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import type pino from "pino";
import { buildTestApp } from "../helpers/app.js";
import { caddyMetric, startCaddy, type TestCaddy } from "../helpers/caddy.js";
import { closeAfter, proxyExchange, sentAgainOnReset } from "../helpers/http.js";

/** Config writes Caddy answered 200 to, each a reload (the agent writes only what differs). */
export async function configWrites(caddy: TestCaddy): Promise<number> {
  let sum = 0;
  for (const method of ["POST", "PUT", "PATCH", "DELETE"]) {
    const n = await caddyMetric(caddy.admin, "caddy_admin_http_requests_total", { code: "200", method });
    if (!Number.isNaN(n)) sum += n;
  }
  return sum;
}

/** An upstream that answers with a cookie, so the log's response headers carry Set-Cookie. */
export async function cookieUpstream(t: { after: (fn: () => unknown) => void }): Promise<number> {
  const server = http.createServer((req, res) => {
    req.resume();
    res.writeHead(200, { "content-type": "text/plain", "set-cookie": "session=upstream-secret" }).end("ok");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closeAfter(t, server);
  return (server.address() as AddressInfo).port;
}

export const write = (domain: string, port: number, extra: Record<string, unknown> = {}) => ({
  domain,
  upstreams: [{ dial: `127.0.0.1:${port}` }],
  ...extra,
});

/** A real Caddy, and an agent on it whose access logs go to a folder of the test's own. */
export async function accessLogSetup(
  t: TestContext,
  env: Record<string, string> = {},
  opts: { logger?: pino.Logger } = {},
) {
  const caddy = await startCaddy(t);
  const dir = mkdtempSync(join(tmpdir(), "hk-access-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const h = await buildTestApp(
    t,
    {
      HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
      HOSTKEEPER_ACCESS_LOG_DIR: dir,
      // A change that finds the writer idle goes at once: what waits behind it is one batch.
      HOSTKEEPER_ROUTE_GATHER_MAX_MS: "0",
      ...env,
    },
    opts,
  );
  const send = (host: string, path = "/", headers: Record<string, string> = {}, agent?: http.Agent) =>
    sentAgainOnReset(() =>
      proxyExchange(caddy.httpPort, host, { path, headers, ...(agent ? { agent } : {}) }),
    );
  const tail = async (id: string, query = "") => {
    const r = await h.call({ method: "GET", url: `/v1/proxy/routes/${id}/access-log${query}` });
    return { status: r.statusCode, body: r.json() as unknown, truncated: r.headers["hostkeeper-truncated"] };
  };
  const config = async (path: string) => JSON.parse((await caddy.admin.read(path)).text) as unknown;
  return { caddy, dir, ...h, send, tail, config, writer: h.app.services.writer };
}

export type Entry = {
  logger: string;
  request: { host: string; uri: string; headers: Record<string, string[]> };
  resp_headers: Record<string, string[]>;
  status: number;
};
