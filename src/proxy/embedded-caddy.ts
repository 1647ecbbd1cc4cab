import { spawn } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { CaddyAdmin } from "./caddy-admin.js";
import type { CaddyAdminAddress } from "./settings.js";

export interface EmbeddedCaddy {
  address: CaddyAdminAddress;
  /** PID when this call started Caddy; undefined when an already running one was adopted. */
  startedPid: number | undefined;
}

async function answers(admin: CaddyAdmin): Promise<boolean> {
  try {
    const res = await admin.raw("GET", "/config/");
    return res.status === 200;
  } catch {
    return false;
  }
}

/**
 * Makes sure the agent's own Caddy runs: admin API on a unix socket in the data dir, config autosaved there
 * and resumed on start, so routes made through the API survive restarts of Caddy. A Caddy already answering
 * on the socket is adopted. A started Caddy runs in its own session and outlives the agent, so restarting
 * or upgrading the agent never interrupts traffic.
 */
export async function ensureEmbeddedCaddy(opts: {
  dataDir: string;
  binary: string;
  log: Logger;
  timeoutMs?: number;
}): Promise<EmbeddedCaddy> {
  const dir = join(opts.dataDir, "caddy");
  const socketPath = join(dir, "admin.sock");
  const address: CaddyAdminAddress = { kind: "unix", socketPath };
  const admin = new CaddyAdmin(address, 2000);
  if (existsSync(socketPath) && (await answers(admin))) {
    opts.log.info({ socket: socketPath }, "using the running embedded Caddy");
    return { address, startedPid: undefined };
  }
  if (!existsSync(opts.binary))
    throw new Error(
      `no Caddy at ${opts.binary}: run scripts/fetch-caddy.sh, or set HOSTKEEPER_CADDY_BINARY or HOSTKEEPER_CADDY_ADMIN`,
    );
  mkdirSync(join(dir, "config"), { recursive: true, mode: 0o700 });
  mkdirSync(join(dir, "data"), { recursive: true, mode: 0o700 });
  const bootstrap = join(dir, "bootstrap.json");
  writeFileSync(
    bootstrap,
    JSON.stringify({ admin: { listen: `unix/${socketPath}|0600`, config: { persist: true } } }),
    { mode: 0o600 },
  );
  const logFd = openSync(join(dir, "caddy.log"), "a", 0o600);
  const child = spawn(
    opts.binary,
    ["run", "--resume", "--config", bootstrap, "--pidfile", join(dir, "caddy.pid")],
    {
      detached: true,
      stdio: ["ignore", logFd, logFd],
      env: {
        ...process.env,
        XDG_CONFIG_HOME: join(dir, "config"),
        XDG_DATA_HOME: join(dir, "data"),
        HOME: dir,
      },
    },
  );
  closeSync(logFd);
  let exited: string | undefined;
  child.once("exit", (code, signal) => {
    exited = `exited with ${signal ?? code}`;
  });
  child.unref();
  const deadline = Date.now() + (opts.timeoutMs ?? 15_000);
  while (Date.now() < deadline) {
    if (exited) throw new Error(`embedded Caddy ${exited}; see ${join(dir, "caddy.log")}`);
    if (await answers(admin)) {
      opts.log.info({ caddyPid: child.pid, socket: socketPath }, "started the embedded Caddy");
      return { address, startedPid: child.pid };
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill("SIGTERM");
  throw new Error(
    `embedded Caddy did not answer on ${socketPath} within ${opts.timeoutMs ?? 15_000} ms; see ${join(dir, "caddy.log")}`,
  );
}
