import type { LockHolder } from "../errors.js";
import { type CommandResult, lastLines } from "./command.js";
import {
  type Advisory,
  type AdvisoryType,
  type ApplyProgress,
  type InstalledPackage,
  packageKey,
  progressCounter,
} from "./package-manager.js";

/* What dnf prints, read: queries, updateinfo, version locks, lock and error messages, progress, its configuration. */

/** The query format of every repoquery: what `parseQuery` reads. */
export const QF = "%{name}\\t%{arch}\\t%{evr}";

/** `repoquery --qf=QF` lines. */
export function parseQuery(stdout: string): InstalledPackage[] {
  const out: InstalledPackage[] = [];
  for (const line of stdout.split("\n")) {
    const [name, arch, version] = line.split("\t");
    if (name && arch && version) out.push({ name, arch, version });
  }
  return out;
}

/**
 * `dnf updateinfo list` lines: `ADVISORY-ID  Severity/Sec.  name-[epoch:]version-release.arch`; the label
 * of a security advisory ends in `/Sec.` (`Unknown/Sec.` without a known severity), others are their type.
 */
export function advisoryPackages(stdout: string): { id: string; security: boolean; nevra: string }[] {
  return stdout
    .split("\n")
    .map((l) => l.trim().split(/\s+/))
    .filter((cols) => cols.length >= 3)
    .map((cols) => ({
      id: cols[0] as string,
      security: (cols[1] as string).endsWith("Sec."),
      nevra: cols[cols.length - 1] as string,
    }));
}

/** `name-[epoch:]version-release.arch` as the package key of its name and arch. */
export function nevraKey(nevra: string): string | undefined {
  const m = /^(.+)-[^-]+-[^-]+\.([^.]+)$/.exec(nevra);
  return m ? packageKey({ name: m[1] as string, arch: m[2] as string }) : undefined;
}

const ADVISORY_TYPES: readonly AdvisoryType[] = ["security", "bugfix", "enhancement", "newpackage"];
const DNF_SEVERITIES = ["critical", "important", "moderate", "low"] as const;

/**
 * The blocks of `dnf updateinfo info`: `  Update ID: X`, `       Type: security`, `    Updated: 2024-01-02
 * 03:04:05` (the advisory's date: its issued date, or a later update of it), `       CVEs: CVE-1` with
 * further values on `           : CVE-2` lines, `   Severity: Important`. Other fields are skipped; the
 * labels are dnf's English ones (the agent runs dnf in the C locale), dates are read as UTC (dnf runs with TZ=UTC).
 */
export function parseUpdateInfo(stdout: string): Map<string, Advisory> {
  const out = new Map<string, Advisory>();
  let current: Advisory | undefined;
  let field = "";
  for (const line of stdout.split("\n")) {
    const m = /^\s*([A-Za-z][A-Za-z ]*)?: (.*)$/.exec(line);
    if (!m) {
      if (/^={10,}$/.test(line.trim())) field = "";
      continue;
    }
    if (m[1] !== undefined) field = m[1].trim();
    const value = (m[2] ?? "").trim();
    if (field === "Update ID") {
      current = { id: value, type: "unknown", severity: "unknown", cves: [], issued: null };
      out.set(value, current);
    } else if (current === undefined) continue;
    else if (field === "Type")
      current.type = ADVISORY_TYPES.find((t) => t === value.toLowerCase()) ?? "unknown";
    else if (field === "Severity")
      current.severity = DNF_SEVERITIES.find((s) => s === value.toLowerCase()) ?? "unknown";
    else if (field === "CVEs" && /^CVE-\d+-\d+$/.test(value) && !current.cves.includes(value))
      current.cves.push(value);
    else if (field === "Updated") {
      const d = /^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})$/.exec(value);
      // libdnf gives the epoch for an advisory without a usable date.
      current.issued = d && !value.startsWith("1970-01-01") ? `${d[1]}T${d[2]}Z` : null;
    }
  }
  return out;
}

/** `dnf versionlock list` lines `name-epoch:version-release.*` (`!` lines exclude versions): name -> locked version-release. */
export function parseVersionLocks(stdout: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of stdout.split("\n")) {
    const m = /^([^!\s#].*)-(?:\d+:)?([^-:]+-[^-]+)\.\*$/.exec(line.trim());
    if (m) out.set(m[1] as string, m[2] as string);
  }
  return out;
}

/** With `exit_on_lock`, dnf says `metadata already locked by 123` and `The application with PID 123 is: dnf`. */
export function dnfLockHolder(r: CommandResult): LockHolder | undefined {
  const text = `${r.stderr}\n${r.stdout}`;
  const m = /(\S+) already locked by (\d+)/.exec(text);
  if (!m) return undefined;
  const name = new RegExp(`The application with PID ${m[2]} is: (.+)`).exec(text)?.[1]?.trim();
  return { lock: `the dnf ${m[1]} lock`, pid: Number(m[2]), name };
}

/** dnf's own error lines: from the first `Error` line on (dependency problems follow it), else the tail. */
export function dnfErrorLines(r: CommandResult): string[] {
  const lines = r.stderr.split("\n").map((l) => l.trimEnd());
  const first = lines.findIndex((l) => /^Error\b/.test(l));
  return first === -1 ? lastLines(r.stderr, 5) : lines.slice(first).filter((l) => l.trim() !== "");
}

/**
 * Progress of a dnf run from its (non-quiet) output: the transaction summary gives how many packages it
 * installs, `(I/T): file.rpm` lines the downloads, and `Installing|Upgrading|... : nevra  I/T` lines the
 * packages put in place.
 */
export function dnfProgress(progress: ((p: ApplyProgress) => void) | undefined) {
  const counter = progressCounter(progress);
  let total = 0;
  return (line: string) => {
    const summary = /^(Install|Upgrade|Downgrade|Reinstall)\s+(\d+) Packages?\s*$/.exec(line);
    if (summary) {
      total += Number(summary[2]);
      counter.setInstallTotal(total);
      return;
    }
    const dl = /^\((\d+)\/(\d+)\): (\S+)\.rpm\b/.exec(line);
    if (dl) {
      // dnf names a file once it is downloaded: said with its count.
      if (dl[3]) counter.fetching(dl[3], false);
      return counter.downloaded(Number(dl[1]), Number(dl[2]));
    }
    if (/^Running transaction\s*$/.test(line)) return counter.installed(undefined);
    const step = /^\s+(?:Installing|Upgrading|Downgrading|Reinstalling)\s+: (\S+)\s+\d+\/\d+/.exec(line);
    if (step) counter.installed(step[1]);
  };
}

/** dnf's sizes (`format_number`): `999`, `5.9 k`, `12 M`, in powers of 1024. */
function dnfBytes(number: string, unit: string): number {
  return Math.round(Number(number) * 1024 ** " kMGTPEZY".indexOf(unit || " "));
}

/** Sections of dnf's transaction table whose packages are written to disk. */
const WRITTEN =
  /^(Installing|Upgrading|Reinstalling|Downgrading|Installing dependencies|Installing weak dependencies):$/;

/**
 * What `dnf --assumeno upgrade` prints before it would start: `Total download size: 12 k` (absent when
 * every package is already in the cache) and the transaction table, whose packages to write are returned
 * as `name-evr.arch`. The table is 80 columns wide off a terminal, so a long name is alone on its line and
 * the rest of its row follows on the next.
 */
export function parseDnfTransaction(stdout: string): { downloadBytes: number; packages: string[] } {
  const dl = /^Total download size: ([\d.]+) ?([kMGTPEZY]?)\s*$/m.exec(stdout);
  const packages: string[] = [];
  let inSection = false;
  let pendingName: string | undefined;
  for (const line of stdout.split("\n")) {
    if (/^\S/.test(line)) {
      inSection = WRITTEN.test(line.trim());
      pendingName = undefined;
      continue;
    }
    if (!inSection) continue;
    const cols = line.trim().split(/\s+/);
    if (line.startsWith("     replacing")) continue;
    if (pendingName !== undefined && cols.length >= 3) {
      packages.push(`${pendingName}-${cols[1]}.${cols[0]}`);
      pendingName = undefined;
    } else if (cols.length === 1 && cols[0]) pendingName = cols[0];
    else if (cols.length >= 5) packages.push(`${cols[0]}-${cols[2]}.${cols[1]}`);
  }
  return { downloadBytes: dl ? dnfBytes(dl[1] ?? "0", dl[2] ?? "") : 0, packages };
}

/** The `cachedir` of dnf's `[main]` section in `conf` (dnf's default when unset). */
export function dnfCacheDir(conf: string): string {
  let main = false;
  for (const raw of conf.split("\n")) {
    const line = raw.trim();
    const section = /^\[(.+)\]$/.exec(line);
    if (section) main = section[1] === "main";
    const m = main ? /^cachedir\s*=\s*(.+)$/.exec(line) : null;
    if (m?.[1]) return m[1].trim();
  }
  return "/var/cache/dnf";
}
