import { fs } from "./node-builtins.js";

const { readFileSync } = fs;

/**
 * Sends `signal` to the process group led by `pid` (a child started with `detached: true`), so what it
 * started (dpkg, rpm scriptlets, an operator's workers) gets it too. A group already gone is not an error.
 */
export function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ESRCH") throw err;
  }
}

/**
 * The kernel's start time of a live process (field 22 of `/proc/<pid>/stat`), or undefined when there is no
 * such process or it is a zombie. With the PID it identifies a process across agent restarts: a PID the
 * kernel gave to another process since has another start time.
 */
export function processStartTime(pid: number): string | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // The command name (field 2) may hold spaces and parentheses; the fields after its last ")" do not.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  if (fields[0] === "Z" || fields[0] === "X") return undefined;
  return fields[19];
}
