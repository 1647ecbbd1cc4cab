import { type ChildProcess, execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

type After = { after: (fn: () => unknown) => void };

/** Runs a program (argument array, no shell) with a time-out; rejects with its stderr on failure. */
export function exec(
  file: string,
  args: readonly string[],
  opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      file,
      args,
      { env: opts.env ?? process.env, cwd: opts.cwd, timeout: 60_000, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) =>
        err ? reject(new Error(`${file} ${args.join(" ")}: ${err.message}\n${stderr}`)) : resolve(stdout),
    );
  });
}

/** `name version` lines (as the sandbox helpers query them) as name -> version. */
export function nameVersionMap(text: string): Record<string, string> {
  return Object.fromEntries(
    text
      .trim()
      .split("\n")
      .filter(Boolean)
      .map((l) => l.split(" ") as [string, string]),
  );
}

async function stopByPid(child: ChildProcess): Promise<void> {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, "exit");
  process.kill(child.pid, "SIGKILL");
  await exited;
}

/**
 * Holds fcntl write locks on `paths` (as apt and dpkg take them; a shell `flock` would not block apt) from a
 * python3 process, until `release` or the end of the test; stopped by its PID.
 */
export async function holdFcntlLocks(t: After, paths: readonly string[]) {
  const script = [
    "import fcntl, os, sys",
    "fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o640) for p in sys.argv[1:]]",
    "[fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB) for fd in fds]",
    "print('locked', flush=True)",
    "sys.stdin.read()",
  ].join("\n");
  const child = spawn("python3", ["-c", script, ...paths], { stdio: ["pipe", "pipe", "inherit"] });
  t.after(() => stopByPid(child));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the lock holder did not start")), 10_000);
    child.stdout?.once("data", () => {
      clearTimeout(timer);
      resolve();
    });
    child.once("exit", (code) => reject(new Error(`the lock holder exited with ${code}`)));
  });
  return { pid: child.pid as number, release: () => stopByPid(child) };
}

/** A live process whose PID is written into `pidFiles` (dnf's locks are PID files of a running process). */
export async function holdPidFiles(t: After, pidFiles: readonly string[]) {
  const child = spawn("sleep", ["600"], { stdio: "ignore" });
  t.after(() => stopByPid(child));
  await once(child, "spawn");
  for (const f of pidFiles) writeFileSync(f, String(child.pid));
  return { pid: child.pid as number, release: () => stopByPid(child) };
}

/**
 * A harmless stand-in for the reboot command: a script that writes the time it ran (ms since the epoch)
 * into a marker file. `command` is the value for HOSTKEEPER_REBOOT_COMMAND.
 */
export function rebootMarker(dir: string) {
  const script = join(dir, "fake-reboot.sh");
  const marker = join(dir, "rebooted-at");
  // Written aside and renamed into place: a reader never sees the file created but still empty.
  writeFileSync(script, '#!/bin/sh\ndate +%s%3N > "$1.tmp" && mv "$1.tmp" "$1"\n');
  chmodSync(script, 0o755);
  return {
    command: `${script} ${marker}`,
    ranAt: (): number | undefined => (existsSync(marker) ? Number(readFileSync(marker, "utf8")) : undefined),
  };
}
