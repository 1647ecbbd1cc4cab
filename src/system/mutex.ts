import { PackageManagerBusyError } from "./errors.js";

/** A first-come first-served lock whose waiters give up after a time-out. */
export class Mutex {
  private locked = false;
  private readonly waiters: (() => void)[] = [];

  /**
   * Runs `fn` alone. When the lock is not free within `timeoutMs`, `fn` does not run and the promise
   * rejects with `onTimeout()`.
   */
  async run<T>(timeoutMs: number, onTimeout: () => Error, fn: () => Promise<T>): Promise<T> {
    if (this.locked) await this.wait(timeoutMs, onTimeout);
    else this.locked = true;
    try {
      return await fn();
    } finally {
      const next = this.waiters.shift();
      if (next) next();
      else this.locked = false;
    }
  }

  /** Resolves once the lock has been handed over to this waiter (it stays locked). */
  private wait(timeoutMs: number, onTimeout: () => Error): Promise<void> {
    return new Promise((resolve, reject) => {
      const waiter = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(onTimeout());
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }
}

/** This agent's own lock on the package manager: one check, download or apply at a time. */
export class PackageLock {
  private readonly mutex = new Mutex();

  constructor(private readonly timeoutMs: number) {}

  /** Runs `fn` holding the lock; fails as busy when it is not free within the lock time-out. */
  run<T>(fn: () => Promise<T>): Promise<T> {
    return this.mutex.run(
      this.timeoutMs,
      () =>
        new PackageManagerBusyError(
          { lock: "the package lock of this agent", pid: process.pid, name: "another check or apply" },
          this.timeoutMs,
        ),
      fn,
    );
  }
}
