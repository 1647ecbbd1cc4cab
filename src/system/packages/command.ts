import { type ChildEnv, spawnChild } from "../../util/child-env.js";
import { signalGroup } from "../../util/processes.js";
import { sleep } from "../../util/timers.js";
import { CommandError, type LockHolder, PackageManagerBusyError } from "../errors.js";

export interface CommandResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  env: ChildEnv;
  timeoutMs: number;
  /**
   * Called with each complete line as it arrives: of stdout, and of file descriptor 3 (`status`), which the
   * child gets as a pipe when this is set (apt's `APT::Status-Fd=3`).
   */
  onLine?: (line: string, stream: "stdout" | "status") => void;
  /** Working folder; the agent's own when unset. */
  cwd?: string;
}

/** Output kept per stream; a simulation of a whole distribution upgrade is a few hundred kilobytes. */
const MAX_OUTPUT = 16 * 1024 * 1024;
/** After SIGTERM on time-out, how long a command gets to stop before SIGKILL. */
const KILL_GRACE_MS = 10_000;

/** Calls `fn` with each complete line of `stream` (a last line without a newline too). */
function eachLine(stream: NodeJS.ReadableStream | null | undefined, fn: (line: string) => void): void {
  let rest = "";
  stream?.on("data", (c: Buffer) => {
    const lines = (rest + c.toString("utf8")).split("\n");
    rest = lines.pop() ?? "";
    for (const l of lines) fn(l);
  });
  stream?.on("end", () => {
    if (rest !== "") fn(rest);
  });
}

function collect(stream: NodeJS.ReadableStream | null): () => string {
  const chunks: Buffer[] = [];
  let size = 0;
  stream?.on("data", (c: Buffer) => {
    if (size >= MAX_OUTPUT) return;
    chunks.push(c);
    size += c.length;
  });
  return () => Buffer.concat(chunks).toString("utf8");
}

/**
 * Runs a program with an argument array (never a shell). The child gets its own process group, so a
 * time-out stops it together with what it started (dpkg, rpm scriptlets).
 */
export function runCommand(file: string, args: readonly string[], o: RunOptions): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const stdio: ("ignore" | "pipe")[] = ["ignore", "pipe", "pipe", ...(o.onLine ? ["pipe" as const] : [])];
    const child = spawnChild(file, args, { env: o.env, cwd: o.cwd, stdio, detached: true });
    const stdout = collect(child.stdout);
    const stderr = collect(child.stderr);
    const onLine = o.onLine;
    if (onLine) {
      eachLine(child.stdout, (l) => onLine(l, "stdout"));
      eachLine(child.stdio[3] as NodeJS.ReadableStream | undefined, (l) => onLine(l, "status"));
    }
    let timedOut = false;
    let killTimer: NodeJS.Timeout | undefined;
    const signal = (s: NodeJS.Signals) => {
      if (child.pid !== undefined) signalGroup(child.pid, s);
    };
    const timer = setTimeout(() => {
      timedOut = true;
      signal("SIGTERM");
      killTimer = setTimeout(() => signal("SIGKILL"), KILL_GRACE_MS);
    }, o.timeoutMs);
    let settled = false;
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(killTimer);
      fn();
    };
    child.once("error", (err: NodeJS.ErrnoException) =>
      finish(() =>
        reject(
          err.code === "ENOENT"
            ? new CommandError(`${file} is not installed on this host`, { command: file })
            : err,
        ),
      ),
    );
    child.once("close", (code, signal) =>
      finish(() => {
        const label = [file, ...args].join(" ");
        if (timedOut)
          reject(
            new CommandError(`${label} did not finish within ${o.timeoutMs / 1000} s and was stopped`, {
              command: label,
            }),
          );
        else resolve({ code, signal, stdout: stdout(), stderr: stderr() });
      }),
    );
  });
}

/**
 * Runs a command that takes the package manager's lock. When the command fails because another program
 * holds the lock, it is run again (it did nothing yet) until `lockTimeoutMs` has passed; then the busy
 * problem names the holder. apt's own `DPkg::Lock::Timeout` is not used: it does not cover the lists lock
 * of `apt-get update`, and after waiting apt no longer says who holds the lock.
 */
export async function runWaitingForLock(
  file: string,
  args: readonly string[],
  o: RunOptions & { lockTimeoutMs: number; lockHolder: (r: CommandResult) => LockHolder | undefined },
): Promise<CommandResult> {
  const started = Date.now();
  for (;;) {
    const r = await runCommand(file, args, o);
    const holder = r.code === 0 ? undefined : o.lockHolder(r);
    if (holder === undefined) return r;
    const left = started + o.lockTimeoutMs - Date.now();
    if (left <= 0) throw new PackageManagerBusyError(holder, o.lockTimeoutMs);
    await sleep(Math.min(500, left));
  }
}

/** A failed command: the manager's own error lines (20 at most, each cut at 500 characters), never its whole output. */
export function commandFailed(label: string, r: CommandResult, lines: readonly string[]): CommandError {
  const shown = lines.slice(0, 20).map((l) => (l.length > 500 ? `${l.slice(0, 500)}...` : l));
  const how = r.code === null ? `signal ${r.signal}` : `exit ${r.code}`;
  return new CommandError(`${label} failed (${how})${shown.length ? `: ${shown.join("; ")}` : ""}`, {
    command: label,
    exitCode: r.code,
    signal: r.signal,
    lines: shown,
  });
}

/** The last few non-empty lines of a stream, for failures that print no recognisable error line. */
export function lastLines(text: string, n: number): string[] {
  return text
    .split("\n")
    .map((l) => l.trimEnd())
    .filter((l) => l.trim() !== "")
    .slice(-n);
}
