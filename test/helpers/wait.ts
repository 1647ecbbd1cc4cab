/** Polls `check` every 10 ms until it returns something other than undefined; fails after `ms`. */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined | Promise<T | undefined>,
  ms = 15_000,
): Promise<T> {
  const end = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
