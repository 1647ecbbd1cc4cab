import { type ChildEnv, spawnChild } from "../../util/child-env.js";

/** What is kept of a hook's output (stdout and stderr as they came): its last this many bytes. */
export const HOOK_OUTPUT_BYTES = 16 * 1024;
/** After the time-out's SIGTERM, how long a hook's process group has before SIGKILL. */
const KILL_GRACE_MS = 5_000;
/** After a hook exits, how long a child it left holding its output open may keep the run waiting. */
const OUTPUT_GRACE_MS = 1_000;

/** How one hook ran. */
export interface HookExit {
  exit_code: number | null;
  signal: string | null;
  timed_out: boolean;
  /** The hook could not be started (the message), or null. */
  error: string | null;
  duration_ms: number;
  output: string;
  output_truncated: boolean;
}

/** The last `HOOK_OUTPUT_BYTES` of what was written. */
class Tail {
  private chunks: Buffer[] = [];
  private size = 0;
  truncated = false;

  add(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.size - (this.chunks[0]?.length ?? 0) >= HOOK_OUTPUT_BYTES) {
      this.size -= this.chunks.shift()?.length ?? 0;
      this.truncated = true;
    }
  }

  text(): string {
    const all = Buffer.concat(this.chunks);
    if (all.length <= HOOK_OUTPUT_BYTES) return all.toString("utf8");
    this.truncated = true;
    return all.subarray(all.length - HOOK_OUTPUT_BYTES).toString("utf8");
  }
}

/** Signals the hook's whole process group (it leads one): what it started goes with it. */
function killGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // gone already
  }
}

/**
 * Runs the executable `path` with `env`, no arguments, no input, in `/`, as the leader of its own process
 * group; past `timeoutMs` the group gets SIGTERM, then SIGKILL. `track` is told of the running child (and
 * of its end with undefined), so that the agent's stop can end it. Never rejects.
 */
export function runHook(
  path: string,
  env: ChildEnv,
  timeoutMs: number,
  track: (stop: (() => void) | undefined) => void = () => {},
): Promise<HookExit> {
  const started = Date.now();
  const tail = new Tail();
  return new Promise((resolve) => {
    const child = spawnChild(path, [], { cwd: "/", env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
    let timedOut = false;
    let error: string | null = null;
    let kill: NodeJS.Timeout | undefined;
    const stop = () => {
      killGroup(child.pid, "SIGTERM");
      kill ??= setTimeout(() => killGroup(child.pid, "SIGKILL"), KILL_GRACE_MS);
    };
    const timer = setTimeout(() => {
      timedOut = true;
      stop();
    }, timeoutMs);
    track(stop);
    child.stdout?.on("data", (c: Buffer) => tail.add(c));
    child.stderr?.on("data", (c: Buffer) => tail.add(c));
    let finished = false;
    const done = (code: number | null, signal: NodeJS.Signals | null) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      clearTimeout(kill);
      track(undefined);
      resolve({
        exit_code: code,
        signal,
        timed_out: timedOut,
        error,
        duration_ms: Date.now() - started,
        output: tail.text(),
        output_truncated: tail.truncated,
      });
    };
    child.on("error", (err) => {
      error = err.message;
      done(null, null);
    });
    child.on("exit", (code, signal) => {
      // What the hook wrote is read to its end, unless a child it left keeps the pipes open.
      const grace = setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
        done(code, signal);
      }, OUTPUT_GRACE_MS);
      child.on("close", () => {
        clearTimeout(grace);
        done(code, signal);
      });
    });
  });
}
