import type { Db, Migration } from "../store/db.js";
import type { DownloadListener, PackageUpdate } from "./packages/package-manager.js";

export const candidateMigrations: Migration[] = [
  {
    name: "system.006_candidates",
    sql: `
      CREATE TABLE system_candidates (
        name TEXT NOT NULL,
        arch TEXT NOT NULL,
        version TEXT NOT NULL,
        role TEXT NOT NULL,
        cves TEXT NOT NULL,
        first_seen_at TEXT NOT NULL,
        PRIMARY KEY (name, arch, version)
      );
      ALTER TABLE system_last_check ADD COLUMN reboot_required_since TEXT;
    `,
  },
];

/**
 * What a candidate version is to its package: the newest (`new`, what a full apply installs), the one a
 * security apply installs (`security`), or both at once.
 */
type Role = "new" | "security" | "both";

/** How many days a version must have been offered before an apply installs it (0: no minimum). */
export interface MinAge {
  regularDays: number;
  securityDays: number;
}

/** The minimum ages an apply request, a check's query or a schedule gives (0 for one it leaves out). */
export const minAgeOf = (r: { min_age_days?: number; security_min_age_days?: number }): MinAge => ({
  regularDays: r.min_age_days ?? 0,
  securityDays: r.security_min_age_days ?? 0,
});

const DAY_MS = 86_400_000;

/**
 * When `version` of `u` reaches its minimum age, if that is still to come (ISO time): counted from
 * `firstSeen` (a version no check has offered yet counts as seen `now`), the security minimum for the
 * version a security update installs, the regular one otherwise; undefined when it may go now.
 */
export function eligibleAt(
  u: PackageUpdate,
  version: string,
  firstSeen: string | undefined,
  min: MinAge,
  now: number,
): string | undefined {
  const security = u.security && version === (u.security_version ?? u.new_version);
  const days = security ? min.securityDays : min.regularDays;
  if (days <= 0) return undefined;
  const at = (firstSeen === undefined ? now : Date.parse(firstSeen)) + days * DAY_MS;
  return at > now ? new Date(at).toISOString() : undefined;
}

/**
 * What an apply or a download asks of the candidates: its check records first sightings (as check-updates
 * does, so that a version first offered at an apply ages from then), and with minimum ages `min`, when each
 * update is eligible, counted from those sightings on the clock `now`.
 */
export function sightings(
  candidates: Pick<CandidateStore, "firstSeen" | "seen">,
  min: MinAge | undefined,
  now: () => number,
): DownloadListener {
  return {
    checked: (found) => candidates.seen(found, new Date(now()).toISOString()),
    ...(min
      ? {
          eligibleAt: (u: PackageUpdate, version: string) =>
            eligibleAt(u, version, candidates.firstSeen(u.name, u.arch, version), min, now()),
        }
      : {}),
  };
}

/** A candidate version as the compliance view reads it. */
export interface Candidate {
  name: string;
  arch: string;
  security: boolean;
  cves: string[];
  firstSeenAt: string;
}

const key = (name: string, arch: string, version: string) => `${name}\u0000${arch}\u0000${version}`;

/**
 * The candidate versions of a check, each with its role and the CVEs its advisories name (a regular update
 * may fix one too); a package's security version first.
 */
function candidatesOf(u: PackageUpdate): { version: string; role: Role; cves: string[] }[] {
  const security = u.security ? (u.security_version ?? u.new_version) : null;
  const cves = [...new Set(u.advisories.filter((a) => a.type === "security").flatMap((a) => a.cves))].sort();
  if (security === null) return [{ version: u.new_version, role: "new", cves }];
  if (security === u.new_version) return [{ version: security, role: "both", cves }];
  return [
    { version: security, role: "security", cves },
    { version: u.new_version, role: "new", cves },
  ];
}

/**
 * When the agent first saw each candidate version of each package (kept across restarts): recorded at every
 * check, pruned of the versions a check no longer offers and of those an apply installed.
 */
export class CandidateStore {
  private readonly upsert;
  private readonly everyVersion;
  private readonly deleteVersion;
  private readonly deletePackage;
  private readonly ofVersion;
  private readonly firstSeenOf;
  private readonly everyCandidate;

  constructor(private readonly db: Db) {
    this.upsert = db.prepare(
      `INSERT INTO system_candidates (name, arch, version, role, cves, first_seen_at) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (name, arch, version) DO UPDATE SET role = excluded.role, cves = excluded.cves`,
    );
    this.everyVersion = db.prepare("SELECT name, arch, version, first_seen_at FROM system_candidates");
    this.deleteVersion = db.prepare(
      "DELETE FROM system_candidates WHERE name = ? AND arch = ? AND version = ?",
    );
    this.deletePackage = db.prepare("DELETE FROM system_candidates WHERE name = ? AND arch = ?");
    this.ofVersion = db.prepare("SELECT arch, role FROM system_candidates WHERE name = ? AND version = ?");
    this.firstSeenOf = db.prepare(
      "SELECT first_seen_at FROM system_candidates WHERE name = ? AND arch = ? AND version = ?",
    );
    this.everyCandidate = db.prepare("SELECT name, arch, role, cves, first_seen_at FROM system_candidates");
  }

  /**
   * Records the candidates of a check seen at `at` (ISO time): new ones get `at`, known ones keep their
   * first sighting, those no longer offered are forgotten. Returns when each was first seen, by
   * name, arch and version.
   */
  seen(
    updates: readonly PackageUpdate[],
    at: string,
  ): (u: { name: string; arch: string; version: string }) => string {
    const rows = this.db.transaction(() => {
      const offered = new Set<string>();
      for (const u of updates)
        for (const c of candidatesOf(u)) {
          offered.add(key(u.name, u.arch, c.version));
          this.upsert.run(u.name, u.arch, c.version, c.role, JSON.stringify(c.cves), at);
        }
      const all = this.everyVersion.all() as {
        name: string;
        arch: string;
        version: string;
        first_seen_at: string;
      }[];
      for (const r of all)
        if (!offered.has(key(r.name, r.arch, r.version))) this.deleteVersion.run(r.name, r.arch, r.version);
      return all;
    })();
    const first = new Map(rows.map((r) => [key(r.name, r.arch, r.version), r.first_seen_at]));
    return (u) => first.get(key(u.name, u.arch, u.version)) ?? at;
  }

  /**
   * Forgets what an apply installed: the version it installed, and every candidate of a package whose
   * newest version it installed (which supersedes its security version).
   */
  installed(upgraded: readonly { name: string; arch?: string; to: string }[]): void {
    this.db.transaction(() => {
      for (const u of upgraded)
        for (const row of this.ofVersion.all(u.name, u.to) as { arch: string; role: Role }[]) {
          if (u.arch !== undefined && u.arch !== row.arch) continue;
          if (row.role === "security") this.deleteVersion.run(u.name, row.arch, u.to);
          else this.deletePackage.run(u.name, row.arch);
        }
    })();
  }

  /** When a check first offered `version` of the package; undefined when none has. */
  firstSeen(name: string, arch: string, version: string): string | undefined {
    const row = this.firstSeenOf.get(name, arch, version) as { first_seen_at: string } | undefined;
    return row?.first_seen_at;
  }

  /** Every candidate known, as of the last check and the applies since. */
  all(): Candidate[] {
    const rows = this.everyCandidate.all() as {
      name: string;
      arch: string;
      role: Role;
      cves: string;
      first_seen_at: string;
    }[];
    return rows.map((r) => ({
      name: r.name,
      arch: r.arch,
      security: r.role !== "new",
      cves: JSON.parse(r.cves) as string[],
      firstSeenAt: r.first_seen_at,
    }));
  }
}
