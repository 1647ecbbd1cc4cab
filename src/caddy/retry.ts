import { sleep } from "../util/timers.js";

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

/**
 * Runs `attempt` up to `attempts` times while it fails with one of those connection errors, waiting 25, 50,
 * 100, 200 ms... between attempts: a reload is over by then, and a Caddy that is really down is said so soon.
 * Any other failure, and the last one, is thrown as it came.
 */
export async function retriedAcrossReload<T>(attempts: number, attempt: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await attempt();
    } catch (err) {
      const code = codeOf(err);
      if (!code || !RELOAD_ERRORS.has(code) || i >= attempts - 1) throw err;
      await sleep(25 * 2 ** i);
    }
  }
}
