import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../../support/loopback.js";
import { request } from "../helpers/serve.js";

type After = { after: (fn: () => unknown) => void };

export const TOKEN = "health-test-token-0123456789";

/**
 * The environment of an agent on its embedded Caddy, kept to loopback: its own data dir (removed when the
 * test ends), the managed server on a free loopback port, a fixed token, no config file of this machine.
 */
export async function embeddedEnv(
  t: After,
  extra: Record<string, string> = {},
): Promise<{ env: Record<string, string>; dataDir: string; httpPort: number }> {
  const dataDir = mkdtempSync(join(tmpdir(), "hk-health-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const config = join(dataDir, "config.json");
  writeFileSync(config, "{}");
  const httpPort = await freePort();
  return {
    dataDir,
    httpPort,
    env: {
      HOSTKEEPER_CONFIG: config,
      HOSTKEEPER_DATA_DIR: dataDir,
      HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${httpPort}`,
      HOSTKEEPER_TOKEN: TOKEN,
      HOSTKEEPER_CADDY_RESTART_BACKOFF_MS: "300",
      ...extra,
    },
  };
}

export interface ReadyzAnswer {
  status: number;
  body: {
    status: "ready" | "not_ready";
    checks: Record<"database" | "caddy_admin" | "listeners", { status: "ok" | "failing"; detail: string }>;
  };
}

export const readyz = async (port: number): Promise<ReadyzAnswer> => {
  const r = await request(port, "GET", "/readyz");
  return { status: r.status, body: JSON.parse(r.body) };
};

/** GET /v1/status, parsed. */
export const agentStatus = async (port: number) => {
  const r = await request(port, "GET", "/v1/status", TOKEN);
  if (r.status !== 200) throw new Error(`GET /v1/status: ${r.status} ${r.body}`);
  return JSON.parse(r.body);
};
