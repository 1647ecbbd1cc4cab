import { hostPackageState } from "./helpers/host-state.js";

/*
 * The whole suite's guard (node --test-global-setup): this machine's own package state, the same files the
 * apt and dnf tests compare, is taken before the first test file starts and compared after the last one
 * ends. A test that reached the host's packages, whichever file it was in, fails the run.
 */

let before: Record<string, string> | undefined;

export function globalSetup(): void {
  before = hostPackageState();
}

export function globalTeardown(): void {
  if (before === undefined) return;
  const after = hostPackageState();
  const changed = [...new Set([...Object.keys(before), ...Object.keys(after)])].filter(
    (path) => before?.[path] !== after[path],
  );
  if (changed.length === 0) return;
  const message = `this machine's own package state or trust store changed during the test run: ${changed.join(", ")}`;
  console.error(message);
  throw new Error(message);
}
