import { doubling, retried } from "../util/retry.js";

/**
 * What a connection meets while Caddy applies a config change: it restarts its admin server (a reset, a
 * refused connection, a socket briefly missing) and hands its listeners over to the new config (a connection
 * queued on the old listener is reset).
 */
const RELOAD_ERRORS = new Set(["ECONNRESET", "EPIPE", "ECONNREFUSED", "ENOENT"]);

/** The errno code of a connection error, on the error itself or on its cause. */
function codeOf(err: unknown): string | undefined {
  const e = err as NodeJS.ErrnoException | undefined;
  return e?.code ?? (e?.cause as NodeJS.ErrnoException | undefined)?.code;
}

/** Whether the connection failed before it was made, so the request was never sent. */
export function neverSent(err: unknown): boolean {
  const e = err as NodeJS.ErrnoException | undefined;
  return ((e?.cause as NodeJS.ErrnoException | undefined)?.syscall ?? e?.syscall) === "connect";
}

/** Whether the failure is one of those a connection meets while Caddy applies a config change. */
const reloadError = (err: unknown): boolean => RELOAD_ERRORS.has(codeOf(err) ?? "");

/**
 * Runs `attempt` up to `attempts` times while it fails with one of those connection errors, waiting 25, 50,
 * 100, 200 ms... between attempts: a reload is over by then, and a Caddy that is really down is said so soon.
 * A request that is not safe to send twice passes `unchanged`, which must show the failed attempt changed
 * nothing. Any other failure, and the last one, is thrown as it came.
 */
export function retriedAcrossReload<T>(
  attempts: number,
  attempt: () => Promise<T>,
  unchanged?: (err: unknown) => Promise<boolean>,
): Promise<T> {
  return retried(attempt, {
    attempts,
    delayMs: doubling(25),
    retryable: reloadError,
    ...(unchanged ? { check: unchanged } : {}),
  });
}
