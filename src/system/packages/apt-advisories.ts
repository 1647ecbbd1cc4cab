import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Logger } from "pino";
import type { ChildEnv } from "../../util/child-env.js";
import { fs } from "../../util/node-builtins.js";
import { type ChangelogEntry, changelogAdvisories, readDebChangelog } from "./apt-changelog.js";
import type { AptCommands } from "./apt-commands.js";
import { aptErrorLines } from "./apt-output.js";
import type { PackageUpdate } from "./package-manager.js";

const { chownSync, existsSync, mkdtempSync, readFileSync, rmSync } = fs;

export interface AptAdvisoriesOptions {
  apt: AptCommands;
  /** dpkg-deb's environment, reading the changelogs. */
  dpkgDebEnv: ChildEnv;
  /** Bound on reading the changelogs of one check (downloads included); 0 reads none. */
  timeoutMs: number;
  log?: Pick<Logger, "warn">;
}

/** Changelogs kept in memory (by package, architecture and version) across checks. */
const CHANGELOG_CACHE_SIZE = 2000;
/** Packages whose changelogs are read at once. */
const CHANGELOG_CONCURRENCY = 4;

type Changelog = { source: string; entries: ChangelogEntry[] };

const cacheKey = (u: PackageUpdate) => `${u.name} ${u.arch} ${u.new_version}`;

/**
 * The advisories of apt's updates, from the changelog of each new version. A .deb apt has already
 * downloaded (into its archives cache) is read where it is; the others are downloaded by apt itself (so
 * from the configured repositories only) into a temporary folder, in one `apt-get download`, and those still
 * missing after a failure once more one by one. They are read a few at a time and deleted; the parsed
 * changelogs are kept.
 */
export class AptAdvisories {
  /** Parsed changelogs by `name arch version`; undefined: the package has no changelog of its own. */
  private readonly changelogs = new Map<string, Changelog | undefined>();

  constructor(private readonly o: AptAdvisoriesOptions) {}

  /**
   * Fills each update's advisories. Bounded by the time-out: what is not read by then has no advisories.
   * A failure leaves advisories empty and is logged; it never fails the check.
   */
  async addTo(updates: PackageUpdate[]): Promise<void> {
    if (this.o.timeoutMs === 0 || updates.length === 0) return;
    const missing = updates.filter((u) => !this.changelogs.has(cacheKey(u)));
    if (missing.length > 0) {
      const deadline = Date.now() + this.o.timeoutMs;
      const dir = mkdtempSync(join(tmpdir(), "hostkeeper-changelogs-"));
      try {
        await this.readChangelogs(await this.debsOf(missing, dir, deadline), deadline);
      } catch (err) {
        this.o.log?.warn(
          { err },
          "the changelogs of the updates could not all be read; their advisories are left out",
        );
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
    for (const u of updates) {
      const c = this.changelogs.get(cacheKey(u));
      if (c) u.advisories = changelogAdvisories(c.source, c.entries, u.current_version, u.new_version);
    }
  }

  /** Reads the changelogs of `debs`, a few at a time, until the deadline. */
  private async readChangelogs(debs: Map<PackageUpdate, string>, deadline: number): Promise<void> {
    const queue = [...debs];
    const worker = async () => {
      for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
        const left = deadline - Date.now();
        if (left <= 0) return;
        const [u, file] = next;
        try {
          this.remember(cacheKey(u), await readDebChangelog(file, u.name, left, this.o.dpkgDebEnv));
        } catch (err) {
          // Not remembered: the next check tries again.
          this.o.log?.warn(
            { err, package: u.name },
            "a changelog could not be read; its advisories are left out",
          );
        }
      }
    };
    await Promise.all(Array.from({ length: CHANGELOG_CONCURRENCY }, worker));
  }

  /** The .deb of each update's new version: from apt's archives cache, else downloaded into `dir`. */
  private async debsOf(
    updates: readonly PackageUpdate[],
    dir: string,
    deadline: number,
  ): Promise<Map<PackageUpdate, string>> {
    const { archives } = await this.o.apt.aptPaths();
    // apt's own file name: the epoch's colon is quoted.
    const fileName = (u: PackageUpdate) => `${u.name}_${u.new_version.replaceAll(":", "%3a")}_${u.arch}.deb`;
    const out = new Map<PackageUpdate, string>();
    for (const u of updates)
      if (existsSync(join(archives, fileName(u)))) out.set(u, join(archives, fileName(u)));
    const fetch = updates.filter((u) => !out.has(u));
    if (fetch.length === 0) return out;
    letAptWrite(dir);
    const got = (u: PackageUpdate) => existsSync(join(dir, fileName(u)));
    // apt fetches what it can when one download fails, but refuses the whole batch when one version is
    // unknown: the packages still missing get one more try each, on their own.
    if (!(await this.download(fetch, dir, deadline)))
      for (const u of fetch.filter((p) => !got(p))) await this.download([u], dir, deadline);
    for (const u of fetch) if (got(u)) out.set(u, join(dir, fileName(u)));
    return out;
  }

  /** `apt-get download` of the new versions of `list` into `dir`; false when it failed (logged). */
  private async download(list: readonly PackageUpdate[], dir: string, deadline: number): Promise<boolean> {
    const left = deadline - Date.now();
    if (left <= 0) return false;
    const specs = list.map((u) => `${u.name}:${u.arch}=${u.new_version}`);
    const r = await this.o.apt.exec("apt-get", ["-q", "download", ...specs], { timeoutMs: left, cwd: dir });
    if (r.code === 0) return true;
    this.o.log?.warn({ packages: specs, errors: aptErrorLines(r) }, "apt-get download failed");
    return false;
  }

  private remember(key: string, value: Changelog | undefined): void {
    if (this.changelogs.size >= CHANGELOG_CACHE_SIZE) {
      const oldest = this.changelogs.keys().next().value;
      if (oldest !== undefined) this.changelogs.delete(oldest);
    }
    this.changelogs.set(key, value);
  }
}

/** apt downloads as the user `_apt` when run as root; it needs to write the folder, or it warns and downloads as root. */
function letAptWrite(dir: string): void {
  if (process.getuid?.() !== 0) return;
  const entry = /^_apt:[^:]*:(\d+):(\d+):/m.exec(
    existsSync("/etc/passwd") ? readFileSync("/etc/passwd", "utf8") : "",
  );
  if (entry) chownSync(dir, Number(entry[1]), Number(entry[2]));
}
