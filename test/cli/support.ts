import { type ChildProcess, type SpawnOptions, spawn } from "node:child_process";
import { once } from "node:events";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { projectRoot } from "../../src/paths.js";
import { buildTestApp, TEST_TOKEN, type TestApp } from "../helpers/app.js";
import { startCaddy, type TestCaddy } from "../helpers/caddy.js";

type After = { after: (fn: () => unknown) => void };

export const CLI = join(projectRoot(), "dist/src/cli/main.js");

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs the compiled CLI as a child with only `env` (plus PATH): nothing of the test's own environment, and
 * an empty config file unless `env` names another, so /etc/hostkeeper/config.json of this machine is never
 * read. Killed by its PID if it outlives `timeoutMs`.
 */
export function runCli(
  args: readonly string[],
  env: Record<string, string>,
  opts: { timeoutMs?: number; uid?: number; gid?: number } = {},
): Promise<CliResult> {
  const dir = mkdtempSync(join(tmpdir(), "hk-cli-"));
  // Readable by everyone: a test may run the CLI as another user.
  chmodSync(dir, 0o755);
  const emptyConfig = join(dir, "config.json");
  writeFileSync(emptyConfig, "{}", { mode: 0o644 });
  const spawnOpts: SpawnOptions = {
    env: { PATH: process.env.PATH, HOSTKEEPER_CONFIG: emptyConfig, ...env },
    stdio: ["ignore", "pipe", "pipe"],
    ...(opts.uid === undefined ? {} : { uid: opts.uid, gid: opts.gid }),
  };
  const child = spawn(process.execPath, [CLI, ...args], spawnOpts);
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      if (child.pid !== undefined && child.exitCode === null) process.kill(child.pid, "SIGKILL");
      reject(new Error(`hostkeeper ${args.join(" ")} did not exit within ${opts.timeoutMs ?? 20_000} ms`));
    }, opts.timeoutMs ?? 20_000);
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
      resolve({ code, stdout, stderr });
    });
  });
}

export interface CliAgent extends TestApp {
  caddy: TestCaddy;
  port: number;
  /** The environment that points the CLI at this agent, with its token. */
  env: Record<string, string>;
}

/** A real agent with a real Caddy, listening on a loopback port; closed when the test ends. */
export async function startCliAgent(t: After, env: Record<string, string> = {}): Promise<CliAgent> {
  const caddy = await startCaddy(t);
  const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, ...env });
  await h.app.listen({ host: "127.0.0.1", port: 0 });
  const port = (h.app.server.address() as AddressInfo).port;
  return {
    ...h,
    caddy,
    port,
    env: {
      HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
      HOSTKEEPER_TOKEN: TEST_TOKEN,
      HOSTKEEPER_DATA_DIR: h.dataDir,
    },
  };
}

/** A problem line as the CLI prints it: one line, `hostkeeper: <status> <code>: <detail>`. */
export function problemLine(stderr: string): { status: number; code: string; detail: string } {
  const lines = stderr.split("\n").filter((l) => l !== "");
  if (lines.length !== 1) throw new Error(`expected one line on stderr, got ${JSON.stringify(stderr)}`);
  const m = /^hostkeeper: (\d{3}) ([a-z_]+): (.*)$/.exec(lines[0] as string);
  if (!m) throw new Error(`not a problem line: ${JSON.stringify(lines[0])}`);
  return { status: Number(m[1]), code: m[2] as string, detail: m[3] as string };
}

/** An empty config file for a CLI the test starts, removed when the test ends. */
function emptyConfig(t: After): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-cli-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "config.json"), "{}");
  return join(dir, "config.json");
}

/** Kills `child` by its PID if it outlives the test. */
function killAfter(t: After, child: ChildProcess): void {
  t.after(() => {
    if (child.pid !== undefined && child.exitCode === null) process.kill(child.pid, "SIGKILL");
  });
}

/** Runs the CLI in a pseudo-terminal (util-linux `script`), as on the host's own terminal; stopped by PID. */
export async function runInTerminal(t: After, args: readonly string[], env: Record<string, string>) {
  const child = spawn("script", ["-qec", [process.execPath, CLI, ...args].join(" "), "/dev/null"], {
    env: { PATH: process.env.PATH, HOSTKEEPER_CONFIG: emptyConfig(t), ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  killAfter(t, child);
  let stdout = "";
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString();
  });
  const [code] = (await once(child, "close")) as [number | null];
  return { code, stdout };
}

export interface RunningCli {
  child: ChildProcess;
  /** What it has written so far. */
  stdout: () => string;
  stderr: () => string;
  /** Sends it SIGINT, as Ctrl-C does, and resolves with its exit code. */
  interrupt: () => Promise<number | null>;
}

/** Starts the CLI as runCli does, left running (for Ctrl-C); killed by its PID if the test ends first. */
export function startCli(t: After, args: readonly string[], env: Record<string, string>): RunningCli {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { PATH: process.env.PATH, HOSTKEEPER_CONFIG: emptyConfig(t), ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  killAfter(t, child);
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    interrupt: async () => {
      const closed = once(child, "close");
      process.kill(child.pid as number, "SIGINT");
      const [code] = (await closed) as [number | null];
      return code;
    },
  };
}
