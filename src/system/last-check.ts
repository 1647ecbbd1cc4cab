import type { Db } from "../store/db.js";
import type { PackageManagerName } from "./packages/package-manager.js";

/** The last successful check-updates: when, and what it found. */
export interface LastCheck {
  checked_at: string;
  package_manager: PackageManagerName;
  security_updates: number;
  regular_updates: number;
  reboot_required: boolean;
  /** The first check that found the reboot required, while it still is; null when it is not. */
  reboot_required_since?: string | null;
}

type LastCheckRow = Omit<LastCheck, "reboot_required"> & { reboot_required: number };

/** The last check that succeeded, one row kept across restarts of the agent. */
export class LastCheckStore {
  private readonly recordStmt;
  private readonly readStmt;

  constructor(db: Db) {
    this.recordStmt = db.prepare(
      `INSERT OR REPLACE INTO system_last_check
         (id, checked_at, package_manager, security_updates, regular_updates, reboot_required, reboot_required_since)
       VALUES (1, ?, ?, ?, ?, ?, ?)`,
    );
    this.readStmt = db.prepare("SELECT * FROM system_last_check WHERE id = 1");
  }

  /** Records a check; the reboot is required since the first check that found it so, in a row. */
  record(c: LastCheck): void {
    const before = this.read();
    const since = c.reboot_required
      ? ((before?.reboot_required ? before.reboot_required_since : null) ?? c.checked_at)
      : null;
    this.recordStmt.run(
      c.checked_at,
      c.package_manager,
      c.security_updates,
      c.regular_updates,
      c.reboot_required ? 1 : 0,
      since,
    );
  }

  /** Null before the first check. */
  read(): LastCheck | null {
    const row = this.readStmt.get() as LastCheckRow | undefined;
    return row === undefined
      ? null
      : {
          checked_at: row.checked_at,
          package_manager: row.package_manager,
          security_updates: row.security_updates,
          regular_updates: row.regular_updates,
          reboot_required: row.reboot_required === 1,
          reboot_required_since: row.reboot_required_since ?? null,
        };
  }
}
