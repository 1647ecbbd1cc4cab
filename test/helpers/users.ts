import { spawnSync } from "node:child_process";

/**
 * Why `uid` cannot run this test's Node, or undefined when it can. A checkout under a private directory
 * (`mktemp -d` makes 0700 ones) keeps other users from the runtime itself, so a test that runs the agent
 * or the CLI as another user has nothing to test there.
 */
export function cannotRunAs(uid: number): string | undefined {
  if (process.getuid?.() !== 0) return "needs root, to run a process as another user";
  const probe = spawnSync(process.execPath, ["-e", ""], { uid, gid: uid });
  return probe.error || probe.status !== 0
    ? `uid ${uid} cannot run ${process.execPath} (a directory above it is private to root)`
    : undefined;
}
