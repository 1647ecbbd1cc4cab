import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import { CaddyAdmin } from "../../src/caddy/admin.js";
import { fetchedCaddyBinary } from "../../src/caddy/settings.js";
import { freePort } from "../../support/loopback.js";
import { metricSample } from "../../support/prometheus.js";

export interface TestCaddy {
  adminUrl: string;
  admin: CaddyAdmin;
  /** Port of the pre-made HTTP server `srv0` (plain HTTP on loopback), when `withServer` was asked for. */
  httpPort: number;
  pid: number;
  dir: string;
  stop(): Promise<void>;
  /** Starts Caddy again on the same ports with the same config (after `stop`). */
  start(): Promise<void>;
}

export interface TestCaddyOptions {
  /** Pre-create `srv0` listening on a loopback port with automatic HTTPS off; default true. */
  withServer?: boolean;
  /** Extra top-level config; `apps` entries are added beside the pre-made http app. */
  extra?: Record<string, unknown>;
  /** Port of the pre-made server; by default a free one. */
  httpPort?: number;
}

/**
 * Waits until this child answers on the admin address: a 200 with Caddy's ETag and our own admin listen.
 * Anything else there is another test's server; our Caddy then fails to bind and exits, which ends the wait.
 */
async function waitFor(
  admin: CaddyAdmin,
  child: ChildProcess,
  listen: string,
  deadlineMs: number,
): Promise<void> {
  const end = Date.now() + deadlineMs;
  while (Date.now() < end) {
    if (child.exitCode !== null) throw new Error(`caddy exited with ${child.exitCode}`);
    try {
      const r = await admin.raw("GET", "/config/");
      if (
        r.status === 200 &&
        r.etag &&
        (JSON.parse(r.text) as { admin?: { listen?: string } })?.admin?.listen === listen
      )
        return;
    } catch {
      // not up yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("caddy did not come up");
}

/** Starts a real Caddy for one test file; stopped (by PID) when the test ends. Nothing is persisted. */
export async function startCaddy(
  t: TestContext | { after: (fn: () => unknown) => void },
  opts: TestCaddyOptions = {},
): Promise<TestCaddy> {
  const dir = mkdtempSync(join(tmpdir(), "hk-caddy-"));
  const adminPort = await freePort();
  const httpPort = opts.httpPort ?? (await freePort());
  const { apps: extraApps, ...extraTop } = opts.extra ?? {};
  const apps: Record<string, unknown> = {
    ...(opts.withServer === false
      ? {}
      : {
          http: {
            // The agent's default, as a Caddy it already set up holds it: its start then changes nothing
            // (a change at start would restart the admin endpoint under a test's first raw request).
            grace_period: "10s",
            servers: {
              srv0: { listen: [`127.0.0.1:${httpPort}`], automatic_https: { disable: true }, routes: [] },
            },
          },
        }),
    // Caddy run as root installs its local CA into the host's trust stores the moment it first issues
    // with it, unless told not to from its first load: every test Caddy is, as the agent's always are.
    pki: { certificate_authorities: { local: { install_trust: false } } },
    ...(extraApps as Record<string, unknown> | undefined),
  };
  const config: Record<string, unknown> = {
    admin: { listen: `127.0.0.1:${adminPort}`, config: { persist: false } },
    apps,
    ...extraTop,
  };
  const configPath = join(dir, "config.json");
  writeFileSync(configPath, JSON.stringify(config));
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  const admin = new CaddyAdmin({ kind: "tcp", url: new URL(adminUrl) }, 10_000);
  let child: ChildProcess | undefined;
  const start = async () => {
    const c = spawn(fetchedCaddyBinary, ["run", "--config", configPath], {
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, XDG_CONFIG_HOME: join(dir, "cfg"), XDG_DATA_HOME: join(dir, "data"), HOME: dir },
    });
    let stderr = "";
    c.stderr?.on("data", (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4000);
    });
    child = c;
    try {
      await waitFor(admin, c, `127.0.0.1:${adminPort}`, 10_000);
    } catch (err) {
      c.kill("SIGKILL");
      throw new Error(`${(err as Error).message}\n${stderr}`);
    }
  };
  const stop = async () => {
    const c = child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise((r) => c.once("exit", r));
    process.kill(c.pid as number, "SIGKILL");
    await exited;
  };
  await start();
  t.after(async () => {
    await stop();
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    adminUrl,
    admin,
    httpPort,
    get pid() {
      return child?.pid ?? -1;
    },
    dir,
    stop,
    start,
  };
}

/**
 * A Caddy that can be made to refuse every config change for real: it loads a TLS certificate from a file,
 * re-reads it on every change, and refuses the change while the file is away, keeping its running config
 * (and serving it). `refuse()` takes the file away, `accept()` puts it back.
 */
export async function startRefusableCaddy(
  t: TestContext | { after: (fn: () => unknown) => void },
): Promise<{ caddy: TestCaddy; dir: string; refuse: () => void; accept: () => void }> {
  const dir = mkdtempSync(join(tmpdir(), "hk-tls-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const cert = join(dir, "c.pem");
  execFileSync(
    "openssl",
    [
      ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
      ...["-keyout", join(dir, "k.pem"), "-out", cert, "-days", "1", "-subj", "/CN=refuse.test"],
    ],
    { stdio: "ignore" },
  );
  const caddy = await startCaddy(t, {
    extra: {
      apps: { tls: { certificates: { load_files: [{ certificate: cert, key: join(dir, "k.pem") }] } } },
    },
  });
  return {
    caddy,
    dir,
    refuse: () => renameSync(cert, `${cert}.away`),
    accept: () => renameSync(`${cert}.away`, cert),
  };
}

/** A sample from Caddy's admin `/metrics` (summed over the lines whose labels include `labels`); NaN when none. */
export async function caddyMetric(
  admin: CaddyAdmin,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  return metricSample((await admin.read("/metrics")).text, name, labels);
}
