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
