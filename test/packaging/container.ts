/**
 * A real systemd to test the packages against: a Debian 12 root made by mmdebstrap (cached under /var/tmp,
 * keyed by its package list), copied for each run and booted with systemd-nspawn on a private network.
 * Commands run inside through nsenter; the container is stopped by `systemctl poweroff` inside, else by
 * signalling the systemd-nspawn process this module started, by its PID.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { existsSync, readFileSync, renameSync, rmSync } from "node:fs";

/**
 * Whether `pid` is PID 1 of a PID namespace of its own (its `NSpid` ends in 1): the container's init.
 * systemd-nspawn's first child is a helper in the host's namespace that forks the init and exits; taken
 * for the container, every command run "inside" failed until the boot's deadline, and the booted
 * container was left running when the test gave up (seen in a clean-clone run: "did not come up (no
 * answer)", with an orphaned systemd).
 */
function isNamespaceInit(pid: number): boolean {
  if (!(pid > 0)) return false;
  try {
    const ids = /^NSpid:\s+(.+)$/m
      .exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]
      ?.trim()
      .split(/\s+/);
    return ids !== undefined && ids.length > 1 && ids[ids.length - 1] === "1";
  } catch {
    return false;
  }
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs a program (no shell) and resolves with its exit code and output, whatever the code; rejects when it
 * cannot start or outlives `timeoutMs` (it is then killed by its PID).
 */
export function run(
  file: string,
  args: readonly string[],
  opts: { timeoutMs?: number; cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<RunResult> {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const timer = setTimeout(() => {
      if (child.pid !== undefined && child.exitCode === null) process.kill(child.pid, "SIGKILL");
      reject(new Error(`${file} ${args.join(" ")} did not finish within ${timeoutMs} ms\n${stderr}`));
    }, timeoutMs);
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Like `run`, but a non-zero exit rejects with the command's output. */
export async function check(
  file: string,
  args: readonly string[],
  opts: Parameters<typeof run>[2] = {},
): Promise<string> {
  const r = await run(file, args, opts);
  if (r.code !== 0)
    throw new Error(`${file} ${args.join(" ")} exited with ${r.code}\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

/** What the root needs besides minbase: systemd as PID 1, curl to send requests, rpm to install the RPM. */
const ROOT_PACKAGES = ["systemd", "systemd-sysv", "dbus", "curl", "rpm"];

/**
 * The Debian 12 root with systemd, built by mmdebstrap (from the mirror of this machine's apt sources) on
 * first use and kept under /var/tmp: ~30 s, then reused by every run with the same package list.
 */
export async function debianRoot(): Promise<string> {
  const key = createHash("sha256")
    .update(["bookworm", "minbase", ...ROOT_PACKAGES].join(" "))
    .digest("hex")
    .slice(0, 12);
  const dir = `/var/tmp/hostkeeper-systemd-root-${key}`;
  if (existsSync(dir)) return dir;
  // Built beside its place and renamed, so a root cut short is never taken for a whole one.
  const partial = `${dir}.partial-${process.pid}`;
  rmSync(partial, { recursive: true, force: true });
  await check(
    "mmdebstrap",
    ["--quiet", "--variant=minbase", `--include=${ROOT_PACKAGES.join(",")}`, "bookworm", partial],
    { timeoutMs: 300_000 },
  );
  renameSync(partial, dir);
  return dir;
}

/** The environment of every command run inside: nothing of the test's own. */
const INSIDE_ENV = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"];

export class Container {
  private console = "";

  private constructor(
    private readonly nspawn: ChildProcess,
    /** PID (on this host) of the container's PID 1. */
    readonly pid: number,
  ) {
    this.keep(nspawn);
  }

  /**
   * Reads the container's output as it comes, stdout and stderr alike: in `--console=pipe` the container's
   * own processes (its systemd at boot) write to both, and a pipe nobody reads fills up and stops the
   * writer, its PID 1 included.
   */
  private keep(nspawn: ChildProcess): void {
    const add = (d: Buffer) => {
      this.console = (this.console + d.toString()).slice(-20_000);
    };
    nspawn.stdout?.on("data", add);
    nspawn.stderr?.on("data", add);
  }

  /**
   * Boots `root` and resolves once its systemd reports the system running (or degraded). The wait is long:
   * in the whole suite the boot shares two cores with the other test files and lintian.
   */
  static async boot(root: string, timeoutMs = 150_000): Promise<Container> {
    const nspawn = spawn(
      "systemd-nspawn",
      ["-q", "-D", root, "--register=no", "--keep-unit", "--private-network", "-b", "--console=pipe"],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    const deadline = Date.now() + timeoutMs;
    let pid: number | undefined;
    while (pid === undefined) {
      if (nspawn.exitCode !== null) throw new Error(`systemd-nspawn exited with ${nspawn.exitCode}`);
      if (Date.now() > deadline) break;
      const children = await run("pgrep", ["-P", String(nspawn.pid)]);
      pid = children.stdout.trim().split("\n").map(Number).find(isNamespaceInit);
      if (pid === undefined) await new Promise((r) => setTimeout(r, 100));
    }
    if (pid === undefined) {
      if (nspawn.pid !== undefined) process.kill(nspawn.pid, "SIGKILL");
      throw new Error("the container's PID 1 did not appear");
    }
    const container = new Container(nspawn, pid);
    let state = "";
    while (Date.now() < deadline) {
      // Until systemd's private bus is up, systemctl fails; retried until the deadline.
      const r = await container
        .exec(["systemctl", "is-system-running", "--wait"], { timeoutMs: deadline - Date.now() })
        .catch(() => undefined);
      state = r?.stdout.trim() ?? "";
      if (state === "running" || state === "degraded") return container;
      await new Promise((r) => setTimeout(r, 200));
    }
    await container.stop();
    throw new Error(
      `the container's systemd did not come up (${state || "no answer"})\n${container.console}`,
    );
  }

  /** Runs a command inside (all namespaces, a clean environment); resolves whatever its exit code. */
  exec(args: readonly string[], opts: { timeoutMs?: number } = {}): Promise<RunResult> {
    return run("nsenter", ["-t", String(this.pid), "-a", "env", "-i", ...INSIDE_ENV, ...args], opts);
  }

  /** Runs a command inside; a non-zero exit rejects with its output. */
  async ok(args: readonly string[], opts: { timeoutMs?: number } = {}): Promise<string> {
    const r = await this.exec(args, opts);
    if (r.code !== 0) throw new Error(`${args.join(" ")} exited with ${r.code}\n${r.stdout}\n${r.stderr}`);
    return r.stdout;
  }

  /** A shell script inside. */
  sh(script: string, opts: { timeoutMs?: number } = {}): Promise<string> {
    return this.ok(["/bin/sh", "-c", script], opts);
  }

  /** Powers the container off and waits for systemd-nspawn to exit; kills its init and it by their PIDs if it does not. */
  async stop(): Promise<void> {
    if (this.nspawn.exitCode !== null || this.nspawn.signalCode !== null) return;
    const exited = once(this.nspawn, "exit");
    await this.exec(["systemctl", "poweroff"], { timeoutMs: 10_000 }).catch(() => undefined);
    const timer = setTimeout(() => {
      // The container's init first: killing it ends its whole PID namespace, which killing systemd-nspawn
      // alone does not (its init would go on, orphaned).
      if (isNamespaceInit(this.pid)) process.kill(this.pid, "SIGKILL");
      if (this.nspawn.pid !== undefined) process.kill(this.nspawn.pid, "SIGKILL");
    }, 30_000);
    await exited;
    clearTimeout(timer);
  }
}
