import { after } from "node:test";

/** What a test's cleanups are registered with: a TestContext, or a suite's list (`suiteCleanups`). */
export type After = { after: (fn: () => unknown) => void };

/**
 * A suite's own `after` list, for what a suite's `before` starts once for all its tests (one agent and Caddy
 * for many cases): run, newest first, when the suite ends. Call it in the `describe` body.
 */
export function suiteCleanups(): After {
  const cleanups: (() => unknown)[] = [];
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  return { after: (fn) => cleanups.push(fn) };
}
