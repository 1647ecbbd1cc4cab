/**
 * Waits for `work` to settle, but no longer than `ms`; true when it settled in time. The timer is cleared
 * either way and never keeps the process alive. For bounded waits at shutdown, where giving up is the plan
 * and `work` is left to finish (or not) on its own.
 */
export async function settledWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
    timer.unref();
  });
  try {
    return await Promise.race([
      work.then(
        () => true,
        () => true,
      ),
      expired,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
