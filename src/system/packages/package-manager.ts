import { join } from "node:path";
import type { Dirent } from "../../util/node-builtins.js";
import { fs } from "../../util/node-builtins.js";
import { excludedBy } from "./exclude.js";

const { readdirSync, statSync } = fs;

export type UpdateType = "security" | "full";
export type PackageManagerName = "apt" | "dnf" | "none";

export const SEVERITIES = ["critical", "important", "moderate", "low", "unknown"] as const;
export type Severity = (typeof SEVERITIES)[number];
export type AdvisoryType = "security" | "bugfix" | "enhancement" | "newpackage" | "unknown";

/** What an update fixes: a dnf updateinfo advisory, or (apt) one changelog entry between the versions. */
export interface Advisory {
  id: string;
  type: AdvisoryType;
  severity: Severity;
  /** CVE ids, in the order the advisory names them, each once. */
  cves: string[];
  /** When the advisory was issued (ISO 8601); null when the source gives no date. */
  issued: string | null;
}

/**
 * Why an apply would not install an update. `hold`: HOSTKEEPER_HOLD_PACKAGES, `apt-mark hold` or dnf
 * versionlock; `phased`: apt defers an Ubuntu phased update on this machine; `kept_back`: the package
 * manager keeps it back (it needs a removal, or its dependencies cannot be met); `excluded`: the apply's
 * `exclude` named it; `deferred`: younger than the apply's minimum age (both in an apply's `held_back` only).
 */
export type HeldReason = "hold" | "phased" | "kept_back" | "excluded" | "deferred";

/** The highest severity of a list of advisories; `unknown` when none has a known severity. */
export function highestSeverity(advisories: readonly Advisory[]): Severity {
  let best: Severity = "unknown";
  for (const a of advisories)
    if (
      a.severity !== "unknown" &&
      (best === "unknown" || SEVERITIES.indexOf(a.severity) < SEVERITIES.indexOf(best))
    )
      best = a.severity;
  return best;
}

/** One package with an available update. */
export interface PackageUpdate {
  name: string;
  arch: string;
  current_version: string;
  /** The newest available version (what a full apply installs). */
  new_version: string;
  security: boolean;
  /** The version a security apply installs; null when the package has no security update. */
  security_version: string | null;
  /** Held (HOSTKEEPER_HOLD_PACKAGES, `apt-mark hold`, dnf versionlock): apply never upgrades it. */
  held: boolean;
  /** Why an apply would not install it; null when it would. */
  held_reason: HeldReason | null;
  advisories: Advisory[];
}

export interface InstalledPackage {
  name: string;
  arch: string;
  version: string;
}

export interface HeldBack {
  name: string;
  arch: string;
  current_version: string;
  available_version: string;
  /** See `HeldReason`; an update the check expected to be installed but was not is `kept_back`. */
  reason: HeldReason;
  /** For `deferred`: when the version reaches its minimum age. */
  eligible_at?: string;
}

/** What one apply changed, from the installed packages before and after. */
export interface ApplyChanges {
  upgraded: { name: string; arch: string; from: string; to: string }[];
  /** New packages an upgrade pulled in. */
  installed: InstalledPackage[];
  /** Packages the upgrade removed (full upgrades may). */
  removed: InstalledPackage[];
  held_back: HeldBack[];
}

/** Where a running apply is: packages downloaded or installed so far, of how many. */
export interface ApplyProgress {
  phase: "downloading" | "installing";
  done: number;
  total: number;
  /** The package the manager last named (being fetched, unpacked or configured), once it named one. */
  current?: string;
}

/** What an apply reports while it runs: the planned updates once known, then its progress. */
export interface ApplyListener {
  /** The check the apply (or download) starts with, whole: every update offered, in scope or not. */
  checked?(found: readonly PackageUpdate[]): void;
  planned?(updates: PackageUpdate[]): void;
  progress?(p: ApplyProgress): void;
  /**
   * When the version `u` would be installed at (`version`) reaches the apply's minimum age, if that is
   * still to come (ISO time): the update waits, kept out as an excluded one; undefined when it may go.
   */
  eligibleAt?(u: PackageUpdate, version: string): string | undefined;
  /**
   * Just before the package manager changes anything, when there is something to install (`updates`, at
   * the versions the apply installs): a rejection ends the apply there, nothing changed.
   */
  beforeUpgrade?(updates: PackageUpdate[]): Promise<void>;
}

/** What a download asks of an apply's listener: its check, and the minimum age its updates wait for. */
export type DownloadListener = Pick<ApplyListener, "checked" | "eligibleAt">;

/** One file a download put into the package manager's cache. */
export interface DownloadedFile {
  file: string;
  bytes: number;
}

/** What a download-only run fetched: the updates in scope, and the files new in the cache. */
export interface DownloadResult {
  planned: PackageUpdate[];
  files: DownloadedFile[];
  bytes: number;
}

/**
 * The package manager's own repair of an interrupted run, done or found necessary before an apply: apt runs
 * `dpkg --configure -a`; dnf reports what `dnf check` and its history say (it has no safe automatic repair).
 */
export interface Recovery {
  command: string;
  /** `ran`: the repair ran and succeeded; `reported`: found and reported, the apply went on. */
  action: "ran" | "reported";
  detail: string;
  /** The manager's own lines about it (at most 20). */
  lines: string[];
}

/** Where a package manager writes: the root it installs into (`/`, or a sandbox's) and its download cache. */
export interface StoragePaths {
  root: string;
  cache: string;
}

/** What the package manager says an upgrade needs: bytes still to download, and the growth of installed files. */
export interface SpaceNeeded {
  downloadBytes: number;
  installBytes: number;
}

/** The one interface of the system area to a package manager; chosen in `select.ts`. */
export interface PackageManager {
  readonly name: PackageManagerName;
  /** Refreshes the package lists (errors are errors), then lists the available updates. */
  check(): Promise<PackageUpdate[]>;
  /**
   * Refreshes and installs the updates of `type`, never a held package nor one `exclude` (glob patterns,
   * exclude.ts) names; says what changed.
   */
  apply(type: UpdateType, listener?: ApplyListener, exclude?: readonly string[]): Promise<ApplyChanges>;
  /**
   * Refreshes and downloads what `apply(type, listener, exclude)` would install into the manager's cache;
   * installs nothing.
   */
  download(
    type: UpdateType,
    listener?: DownloadListener,
    exclude?: readonly string[],
  ): Promise<DownloadResult>;
  /**
   * Before an apply: finds a run of the package manager left unfinished (`afterInterruption`: the agent's
   * previous apply was cut short) and repairs or reports it; null when there was nothing to do.
   */
  recover(afterInterruption: boolean): Promise<Recovery | null>;
  rebootRequired(): Promise<boolean>;
  storage(): Promise<StoragePaths>;
  /** What an upgrade of `type` would download and add, from the package lists as they are (no refresh, no lock). */
  spaceNeeded(type: UpdateType): Promise<SpaceNeeded>;
  /** The package manager's own version (`2.6.1`), read from the program; undefined when it cannot say. */
  version(): Promise<string | undefined>;
}

/** How long asking a package manager for its version may take. */
export const VERSION_TIMEOUT_MS = 5_000;

/** The steps an adapter provides for `applyUpdates`. */
export interface UpgradeSteps {
  check(): Promise<PackageUpdate[]>;
  /** Every installed package, keyed by `packageKey`. */
  installed(): Promise<Map<string, InstalledPackage>>;
  /** Runs the upgrade of `type`, excluding held packages and `exclude`; only downloads with `downloadOnly`. */
  upgrade(
    type: UpdateType,
    o: { downloadOnly?: boolean; progress?: (p: ApplyProgress) => void; exclude?: readonly string[] },
  ): Promise<void>;
  /** The package files in the manager's download cache: path -> size in bytes. */
  cachedFiles(): Promise<Map<string, number>>;
}

export const packageKey = (p: { name: string; arch: string }) => `${p.name}\u0000${p.arch}`;

/**
 * What an apply (or the download ahead of it) of `type` leaves out of the updates `found`: the held ones,
 * those `exclude` names, and those too young for the listener's minimum age (`waiting`: name -> when it is
 * eligible), kept out by name as an exclusion is (`keptOut`, the names for the package manager).
 */
function selection(
  found: readonly PackageUpdate[],
  type: UpdateType,
  listener: DownloadListener,
  exclude: readonly string[],
) {
  const excluded = excludedBy(exclude);
  const planned = found.filter((u) => type === "full" || u.security);
  const versionOf = (u: PackageUpdate) =>
    type === "security" && u.security_version ? u.security_version : u.new_version;
  const waiting = new Map<string, string>();
  for (const u of planned) {
    const at = u.held || excluded(u.name) ? undefined : listener.eligibleAt?.(u, versionOf(u));
    if (at !== undefined) waiting.set(u.name, at);
  }
  const kept = (name: string) => excluded(name) || waiting.has(name);
  const going = planned.filter((u) => !u.held && !kept(u.name));
  return { planned, going, excluded, waiting, kept, versionOf, keptOut: [...exclude, ...waiting.keys()] };
}

/**
 * The apply flow both adapters share: the plan comes from a fresh check, the result from comparing the
 * installed packages before and after, so the answer says what really happened, not what was planned.
 */
export async function applyUpdates(
  steps: UpgradeSteps,
  type: UpdateType,
  listener: ApplyListener = {},
  exclude: readonly string[] = [],
): Promise<ApplyChanges> {
  const found = await steps.check();
  listener.checked?.(found);
  const { planned, going, excluded, waiting, kept, versionOf, keptOut } = selection(
    found,
    type,
    listener,
    exclude,
  );
  listener.planned?.(planned);
  const before = await steps.installed();
  const anyToInstall = going.length > 0;
  if (anyToInstall) {
    await listener.beforeUpgrade?.(going.map((u) => ({ ...u, new_version: versionOf(u) })));
    await steps.upgrade(type, { progress: listener.progress, exclude: keptOut });
  }
  const after = anyToInstall ? await steps.installed() : before;

  const changes: ApplyChanges = { upgraded: [], installed: [], removed: [], held_back: [] };
  for (const [key, now] of after) {
    const was = before.get(key);
    if (!was) changes.installed.push(now);
    else if (was.version !== now.version)
      changes.upgraded.push({ name: now.name, arch: now.arch, from: was.version, to: now.version });
  }
  for (const [key, was] of before) if (!after.has(key)) changes.removed.push(was);
  for (const u of planned) {
    const now = after.get(packageKey(u));
    if (!u.held && !kept(u.name) && now?.version !== u.current_version) continue;
    const eligible = u.held || excluded(u.name) ? undefined : waiting.get(u.name);
    changes.held_back.push({
      name: u.name,
      arch: u.arch,
      current_version: u.current_version,
      available_version: versionOf(u),
      reason: u.held
        ? "hold"
        : excluded(u.name)
          ? "excluded"
          : eligible
            ? "deferred"
            : (u.held_reason ?? "kept_back"),
      ...(eligible ? { eligible_at: eligible } : {}),
    });
  }
  return changes;
}

/** The download both adapters share: the same selection as an apply, the result read from the cache. */
export async function downloadUpdates(
  steps: UpgradeSteps,
  type: UpdateType,
  listener: DownloadListener = {},
  exclude: readonly string[] = [],
): Promise<DownloadResult> {
  const found = await steps.check();
  listener.checked?.(found);
  const { going: planned, keptOut } = selection(found, type, listener, exclude);
  if (planned.length === 0) return { planned, files: [], bytes: 0 };
  const before = await steps.cachedFiles();
  await steps.upgrade(type, { downloadOnly: true, exclude: keptOut });
  const files: DownloadedFile[] = [];
  for (const [path, bytes] of await steps.cachedFiles())
    if (before.get(path) !== bytes) files.push({ file: path.slice(path.lastIndexOf("/") + 1), bytes });
  files.sort((a, b) => a.file.localeCompare(b.file));
  return { planned, files, bytes: files.reduce((n, f) => n + f.bytes, 0) };
}

/** Package files (`*.deb`, `*.rpm`) under `dir`, at any depth: path -> size. A missing folder is empty. */
export function packageFilesIn(dir: string): Map<string, number> {
  const out = new Map<string, number>();
  let entries: Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true, recursive: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    if (!e.isFile() || !/\.(deb|rpm)$/.test(e.name)) continue;
    const path = join(e.parentPath, e.name);
    try {
      out.set(path, statSync(path).size);
    } catch {
      // removed meanwhile
    }
  }
  return out;
}

/** Turns lines of a package manager's output into progress; `counter` keeps the state of one run. */
export function progressCounter(progress: ((p: ApplyProgress) => void) | undefined) {
  const installed = new Set<string>();
  let installTotal: number | undefined;
  let installing = false;
  let download = { done: 0, total: 0 };
  let current: string | undefined;
  const named = () => (current === undefined ? {} : { current });
  return {
    setInstallTotal(n: number) {
      installTotal = n;
    },
    downloaded(done: number, total: number) {
      download = { done, total };
      if (!installing) progress?.({ phase: "downloading", done, total, ...named() });
    },
    /** The manager named the package it fetches; `report`: say so now, else with the next counts. */
    fetching(pkg: string, report = true) {
      if (installing) return;
      current = pkg;
      if (report && download.total > 0) progress?.({ phase: "downloading", ...download, current });
    },
    /**
     * A package reached its installed state (`pkg`); undefined: the installation phase started, or a step
     * of it (unpacking, configuring) on package `working`, now the current one.
     */
    installed(pkg: string | undefined, working?: string) {
      // A name from the downloads is no longer what the manager works on.
      if (!installing) current = undefined;
      installing = true;
      if (pkg !== undefined) installed.add(pkg);
      current = working ?? pkg ?? current;
      const done = installed.size;
      progress?.({ phase: "installing", done, total: Math.max(done, installTotal ?? done), ...named() });
    },
  };
}
