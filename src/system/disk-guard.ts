import { dirname, join, resolve } from "node:path";
import { promisify } from "node:util";
import type { Logger } from "pino";
import { fs } from "../util/node-builtins.js";
import { InsufficientStorageError, type ShortFilesystem } from "./errors.js";
import type { PackageManager, SpaceNeeded, StoragePaths, UpdateType } from "./packages/package-manager.js";

const stat = promisify(fs.stat);
const statfs = promisify(fs.statfs);

/** MB as `df -m` counts them. */
const MB = 1024 * 1024;

export interface DiskGuardOptions {
  manager: PackageManager;
  /** HOSTKEEPER_MIN_FREE_MB: kept free on every filesystem an operation writes, beyond what it needs. */
  minFreeMb: number;
  log: Pick<Logger, "warn">;
}

/** One path an operation writes and the bytes it puts there. */
interface Target {
  path: string;
  bytes: number;
}

/** The path itself, or its nearest existing parent (a sandbox has no `/boot`): it is on that filesystem. */
async function existing(path: string): Promise<{ path: string; dev: number }> {
  for (let p = path; ; p = dirname(p)) {
    try {
      return { path: p, dev: (await stat(p)).dev };
    } catch (err) {
      if (p === dirname(p)) throw err;
    }
  }
}

/**
 * The disk guard: before a download or an apply, each filesystem it writes must have free (for unprivileged
 * use, as `df` shows it) what the package manager says it needs there plus `minFreeMb`. A download writes
 * the package cache; an apply the cache, `/`, `/usr`, `/var` and `/boot` of the manager's root, the growth
 * of installed files counted on `/usr`'s filesystem. Paths on one filesystem count together, named by the
 * first of them.
 */
export class DiskGuard {
  constructor(private readonly o: DiskGuardOptions) {}

  /** Throws `InsufficientStorageError` when a filesystem is short; changes nothing. */
  async check(operation: "download" | "apply", type: UpdateType): Promise<void> {
    let paths: StoragePaths;
    try {
      paths = await this.o.manager.storage();
    } catch (err) {
      this.o.log.warn(
        { err },
        `the disk guard cannot tell where the package manager writes; ${operation} goes on`,
      );
      return;
    }
    const need = await this.o.manager.spaceNeeded(type).catch((err: unknown): SpaceNeeded => {
      // The lists may be missing (no check yet) or dnf busy: the minimum free space is still checked.
      this.o.log.warn({ err }, "the package manager did not say how much space the updates need");
      return { downloadBytes: 0, installBytes: 0 };
    });
    const root = resolve(paths.root);
    const cache = resolve(paths.cache);
    const targets: Target[] =
      operation === "download"
        ? [{ path: cache, bytes: need.downloadBytes }]
        : [
            { path: root, bytes: 0 },
            { path: join(root, "usr"), bytes: need.installBytes },
            { path: join(root, "var"), bytes: 0 },
            { path: join(root, "boot"), bytes: 0 },
            { path: cache, bytes: need.downloadBytes },
          ];
    const short = await this.shortOf(targets);
    if (short.length > 0) throw new InsufficientStorageError(operation, short, this.o.minFreeMb);
  }

  private async shortOf(targets: readonly Target[]): Promise<ShortFilesystem[]> {
    const byDevice = new Map<number, { path: string; at: string; bytes: number }>();
    for (const t of targets) {
      const found = await existing(t.path);
      const fsys = byDevice.get(found.dev) ?? { path: t.path, at: found.path, bytes: 0 };
      fsys.bytes += Math.max(0, t.bytes);
      byDevice.set(found.dev, fsys);
    }
    const short: ShortFilesystem[] = [];
    for (const f of byDevice.values()) {
      const s = await statfs(f.at);
      const free = s.bavail * s.bsize;
      const needed = f.bytes + this.o.minFreeMb * MB;
      if (free < needed)
        short.push({ path: f.path, free_mb: Math.floor(free / MB), needed_mb: Math.ceil(needed / MB) });
    }
    return short;
  }
}
