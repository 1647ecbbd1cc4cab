import { uptime } from "node:os";
import type { Db } from "../../store/db.js";
import { fs } from "../../util/node-builtins.js";

const { readFileSync } = fs;

/** Where the agent reads which boot of the host it runs in, and the running kernel. */
export interface BootSources {
  /** A file holding the kernel's boot id (`/proc/sys/kernel/random/boot_id`). */
  bootIdFile: string;
  /** A file holding the running kernel's release, what `uname -r` prints (`/proc/sys/kernel/osrelease`). */
  kernelReleaseFile: string;
}

export interface Boot {
  boot_id: string;
  kernel: string | null;
  booted_at: string;
}

export interface BootRow {
  boot_id: string;
  seen_at: string;
  booted_at: string | null;
  kernel: string | null;
  previous_boot_id: string | null;
  planned_apply_id: number | null;
}

const readTrimmed = (path: string): string | null => {
  try {
    const v = readFileSync(path, "utf8").trim();
    return v === "" ? null : v;
  } catch {
    return null;
  }
};

/** The host's boot now; undefined when the boot id cannot be read (boot tracking is then off). */
export function currentBoot(s: BootSources): Boot | undefined {
  const id = readTrimmed(s.bootIdFile);
  if (id === null) return undefined;
  const booted = Math.floor((Date.now() - uptime() * 1000) / 1000) * 1000;
  return { boot_id: id, kernel: readTrimmed(s.kernelReleaseFile), booted_at: new Date(booted).toISOString() };
}

/** The boots the agent has seen: one row per boot id, the first time the agent ran in it. */
export class BootLog {
  constructor(private readonly db: Db) {}

  last(): BootRow | undefined {
    return this.db.prepare("SELECT * FROM system_boots ORDER BY rowid DESC LIMIT 1").get() as
      | BootRow
      | undefined;
  }

  /** The latest boot that followed another one the agent saw (a reboot it noticed). */
  lastReboot(): BootRow | undefined {
    return this.db
      .prepare("SELECT * FROM system_boots WHERE previous_boot_id IS NOT NULL ORDER BY rowid DESC LIMIT 1")
      .get() as BootRow | undefined;
  }

  /** Records a boot seen for the first time; call inside the transaction of what it changes. */
  record(boot: Boot, previous: string | null, plannedApplyId: number | null): void {
    this.db
      .prepare(
        `INSERT OR IGNORE INTO system_boots (boot_id, seen_at, booted_at, kernel, previous_boot_id, planned_apply_id)
         VALUES (?, ?, ?, ?, ?, ?)`,
      )
      .run(boot.boot_id, new Date().toISOString(), boot.booted_at, boot.kernel, previous, plannedApplyId);
  }
}
