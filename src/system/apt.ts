import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import { CHILD_ENV, type ChildEnv, childEnv } from "../util/child-env.js";
import { fs } from "../util/node-builtins.js";
import { plural } from "../util/text.js";
import { type ChangelogEntry, changelogAdvisories, readDebChangelog } from "./apt-changelog.js";
import { type CommandResult, commandFailed, lastLines, runCommand, runWaitingForLock } from "./command.js";
import type { LockHolder } from "./errors.js";
import {
  type ApplyChanges,
  type ApplyListener,
  type ApplyProgress,
  applyUpdates,
  type DownloadResult,
  downloadUpdates,
  type HeldReason,
  type InstalledPackage,
  type PackageManager,
  type PackageUpdate,
  packageFilesIn,
  packageKey,
  progressCounter,
  type Recovery,
  type UpdateType,
  type UpgradeSteps,
  VERSION_TIMEOUT_MS,
} from "./package-manager.js";

const { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } = fs;

export interface AptOptions {
  /** Environment of the agent; apt's variables are added to it. */
  env: NodeJS.ProcessEnv;
  /** Given to apt as APT_CONFIG; undefined leaves apt's own configuration. */
  aptConfig: string | undefined;
  hold: readonly string[];
  rebootRequiredFile: string;
  /** needrestart executable; used for the kernel status when it exists. */
  needrestart: string | undefined;
  /** Lists the services to restart instead of `needrestart -b -r l` (same output); [] : not asked. */
  servicesCommand: readonly string[] | undefined;
  /** Bound on reading the changelogs of one check (downloads included); 0 reads none. */
  changelogTimeoutMs: number;
  lockTimeoutMs: number;
  commandTimeoutMs: number;
  log?: Pick<Logger, "warn">;
}

/** Changelogs kept in memory (by package, architecture and version) across checks. */
const CHANGELOG_CACHE_SIZE = 2000;
/** Packages whose changelogs are read at once. */
const CHANGELOG_CONCURRENCY = 4;

/** The options of a simulation that lists every update: held and phased ones too. */
const SEE_ALL = ["-o", "APT::Ignore-Hold=true", "-o", "APT::Get::Always-Include-Phased-Updates=true"];

/**
 * Security-only pinning (the data unattended-upgrades matches): installed versions stay at 100, versions
 * from a security origin (label Debian-Security, or a suite or codename ending in `-security`, which covers
 * Ubuntu) rise to 500, everything else drops to 50, so it can come in only as a new dependency. A package
 * whose newest version is in a regular suite thus gets its security version. The entries come before the
 * administrator's own preferences, and apt takes the first matching entry.
 */
const SECURITY_PINS = [
  ["release a=now", 100],
  ["release l=Debian-Security", 500],
  ["release a=*-security", 500],
  ["release n=*-security", 500],
  ["release *", 50],
]
  .map(([pin, priority]) => `Package: *\nPin: ${pin}\nPin-Priority: ${priority}\n`)
  .join("\n");

/** A planned change of `apt-get -s`: `Inst name [old] (new Label:Version/Suite, ... [arch])`. */
interface SimulatedUpgrade {
  name: string;
  arch: string;
  from: string;
  to: string;
  security: boolean;
}

const INST_RE = /^Inst (\S+) \[([^\]]+)\] \((\S+) (.*) \[([^\]]+)\]\)/;

/** An origin is security when its label is Debian-Security or its suite ends in `-security`. */
export function isSecurityOrigin(origin: string): boolean {
  const slash = origin.lastIndexOf("/");
  const suite = origin.slice(slash + 1);
  const labelVersion = slash === -1 ? "" : origin.slice(0, slash);
  const colon = labelVersion.lastIndexOf(":");
  const label = colon === -1 ? labelVersion : labelVersion.slice(0, colon);
  return label === "Debian-Security" || suite.endsWith("-security");
}

/** `NEEDRESTART-SVC: name.service` lines of `needrestart -b`. */
export function parseNeedrestartServices(stdout: string): string[] {
  const units = [...stdout.matchAll(/^NEEDRESTART-SVC:\s*(\S+)/gm)].map((m) => m[1] as string);
  return [...new Set(units)].sort();
}

/** The upgrades in the output of `apt-get -s`, keyed by `packageKey`. New installs and removals are left out. */
export function parseSimulation(stdout: string): Map<string, SimulatedUpgrade> {
  const out = new Map<string, SimulatedUpgrade>();
  for (const line of stdout.split("\n")) {
    const m = INST_RE.exec(line);
    if (!m) continue;
    const [, qualified = "", from = "", to = "", origins = "", arch = ""] = m;
    const name = qualified.split(":")[0] ?? qualified;
    const security = origins.split(", ").some(isSecurityOrigin);
    out.set(packageKey({ name, arch }), { name, arch, from, to, security });
  }
  return out;
}

/** apt's lock messages: `E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 123 (apt-get)`. */
export function aptLockHolder(r: CommandResult): LockHolder | undefined {
  const text = `${r.stderr}\n${r.stdout}`;
  const m = /Could not get lock (.+?)\.? It is held by process (\d+)(?: \(([^)]*)\))?/.exec(text);
  if (m) return { lock: m[1] ?? "the apt lock", pid: Number(m[2]), name: m[3] };
  const n = /Could not get lock (\S+?)\.?(?:\s|$)|Unable to acquire the dpkg frontend lock \((\S+)\)/.exec(
    text,
  );
  if (n) return { lock: n[1] ?? n[2] ?? "the apt lock", pid: undefined, name: undefined };
  // dpkg run directly (`dpkg --configure -a`).
  const d = /(dpkg (?:frontend )?lock) was locked by another process with pid (\d+)/.exec(text);
  if (d) return { lock: `the ${d[1]}`, pid: Number(d[2]), name: undefined };
  return undefined;
}

/** apt's own error lines: `E:`/`W:` on stderr, `Err:` fetch lines on stdout. */
export function aptErrorLines(r: CommandResult): string[] {
  const lines = [
    ...r.stdout.split("\n").filter((l) => /^Err:\d+ /.test(l)),
    ...r.stderr.split("\n").filter((l) => /^[EW]: /.test(l)),
  ].map((l) => l.trimEnd());
  return lines.length > 0 ? lines : lastLines(r.stderr, 5);
}

/**
 * Progress of an apt-get run from its output: the plan line on stdout gives how many packages it installs,
 * `APT::Status-Fd` lines the downloads (`dlstatus:N:PERCENT:Retrieving file I of T`) and dpkg's steps
 * (`pmstatus:PKG:PERCENT:Installed PKG (arch)`).
 */
export function aptProgress(progress: ((p: ApplyProgress) => void) | undefined) {
  const counter = progressCounter(progress);
  return (line: string, stream: "stdout" | "status") => {
    if (stream === "stdout") {
      const plan = /^(\d+) upgraded, (\d+) newly installed, /.exec(line);
      if (plan) counter.setInstallTotal(Number(plan[1]) + Number(plan[2]));
      return;
    }
    const dl = /^dlstatus:\d+:([\d.]+):.* (\d+) of (\d+)/.exec(line);
    if (dl) {
      const total = Number(dl[3]);
      counter.downloaded(Number(dl[1]) >= 100 ? total : Math.max(0, Number(dl[2]) - 1), total);
      return;
    }
    const pm = /^pmstatus:([^:]+):[\d.]+:(.*)$/.exec(line);
    if (!pm) return;
    const [, pkg = "", message = ""] = pm;
    counter.installed(message.startsWith("Installed ") ? pkg : undefined);
  };
}

/** `apt-config dump` lines of a list option: `DPkg::Options:: "--root=/x";` -> `--root=/x`. */
export function aptListOption(dump: string, name: string): string[] {
  const re = new RegExp(`^${name}:: "(.*)";$`, "i");
  return dump
    .split("\n")
    .map((l) => re.exec(l)?.[1])
    .filter((v): v is string => v !== undefined);
}

/**
 * apt and dpkg (Debian, Ubuntu). The plan is read from `apt-get -s` (a stable output, unlike `apt list`);
 * security updates are found by simulating with security-only pinning, and installed the same way.
 */
export class AptPackageManager implements PackageManager, UpgradeSteps {
  readonly name = "apt" as const;
  private readonly env: ChildEnv;
  /** dpkg-deb's, reading changelogs: no apt variables, the C locale. */
  private readonly dpkgDebEnv: ChildEnv;
  private paths: Promise<AptPaths> | undefined;
  /** Parsed changelogs by `name arch version`; undefined: the package has no changelog of its own. */
  private readonly changelogs = new Map<string, { source: string; entries: ChangelogEntry[] } | undefined>();

  constructor(private readonly o: AptOptions) {
    this.env = childEnv(o.env, CHILD_ENV.packages, {
      LC_ALL: "C",
      DEBIAN_FRONTEND: "noninteractive",
      APT_LISTCHANGES_FRONTEND: "none",
      // needrestart's apt hook only lists what would need a restart; it never restarts services or asks.
      NEEDRESTART_MODE: "l",
      ...(o.aptConfig === undefined ? {} : { APT_CONFIG: o.aptConfig }),
    });
    this.dpkgDebEnv = childEnv(o.env, CHILD_ENV.packages, { LC_ALL: "C" });
  }

  async check(): Promise<PackageUpdate[]> {
    await this.run("apt-get update", "apt-get", ["-q", "-o", "APT::Update::Error-Mode=any", "update"], true);
    // Every update, held and phased ones included; then what each apply would really install.
    const newest = await this.simulate(SEE_ALL, "");
    const security = await this.simulate(SEE_ALL, SECURITY_PINS);
    const full = await this.simulate([], "");
    const securityApply = await this.simulate([], SECURITY_PINS, ["upgrade", "--with-new-pkgs"]);
    const marked = await this.markedHold();
    const notInFull = [...newest.keys()].filter((k) => !full.has(k));
    // Only apt's phasing decides whether an update is phased: what a simulation without it would take.
    const phased =
      notInFull.length > 0
        ? await this.simulate(["-o", "APT::Get::Always-Include-Phased-Updates=true"], "")
        : new Map<string, SimulatedUpgrade>();
    const updates = [...newest.entries()].map(([key, u]): PackageUpdate => {
      const s = security.get(key);
      const securityVersion = s?.security ? s.to : u.security ? u.to : null;
      const held = this.o.hold.includes(u.name) || marked.has(u.name) || marked.has(`${u.name}:${u.arch}`);
      let reason: HeldReason | null = null;
      if (held) reason = "hold";
      else if (!full.has(key)) reason = phased.has(key) ? "phased" : "kept_back";
      else if (securityVersion !== null && !securityApply.has(key)) reason = "kept_back";
      return {
        name: u.name,
        arch: u.arch,
        current_version: u.from,
        new_version: u.to,
        security: securityVersion !== null,
        security_version: securityVersion,
        held,
        held_reason: reason,
        advisories: [],
      };
    });
    await this.addAdvisories(updates);
    return updates;
  }

  /** Packages marked with `apt-mark hold`, as `name` or `name:arch`. */
  private async markedHold(): Promise<Set<string>> {
    const r = await this.run("apt-mark showhold", "apt-mark", ["showhold"]);
    return new Set(
      r.stdout
        .split("\n")
        .map((l) => l.trim())
        .filter(Boolean),
    );
  }

  /**
   * Fills each update's advisories from the changelog of its new version. A .deb apt has already downloaded
   * (into its archives cache) is read where it is; the others are downloaded by apt itself (so from the
   * configured repositories only) into a temporary folder, in one `apt-get download`, and those still missing
   * after a failure once more one by one. They are read a few at a time and deleted; the
   * parsed changelogs are kept. Bounded by `changelogTimeoutMs`: what is not read by then has no advisories.
   * A failure leaves advisories empty and is logged; it never fails the check.
   */
  private async addAdvisories(updates: PackageUpdate[]): Promise<void> {
    if (this.o.changelogTimeoutMs === 0 || updates.length === 0) return;
    const cacheKey = (u: PackageUpdate) => `${u.name} ${u.arch} ${u.new_version}`;
    const missing = updates.filter((u) => !this.changelogs.has(cacheKey(u)));
    if (missing.length > 0) {
      const deadline = Date.now() + this.o.changelogTimeoutMs;
      const dir = mkdtempSync(join(tmpdir(), "hostkeeper-changelogs-"));
      try {
        const debs = await this.debsOf(missing, dir, deadline);
        const queue = [...debs];
        const worker = async () => {
          for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
            const left = deadline - Date.now();
            if (left <= 0) return;
            const [u, file] = next;
            try {
              this.remember(cacheKey(u), await readDebChangelog(file, u.name, left, this.dpkgDebEnv));
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

  /** The .deb of each update's new version: from apt's archives cache, else downloaded into `dir`. */
  private async debsOf(
    updates: readonly PackageUpdate[],
    dir: string,
    deadline: number,
  ): Promise<Map<PackageUpdate, string>> {
    const { archives } = await this.aptPaths();
    // apt's own file name: the epoch's colon is quoted.
    const fileName = (u: PackageUpdate) => `${u.name}_${u.new_version.replaceAll(":", "%3a")}_${u.arch}.deb`;
    const out = new Map<PackageUpdate, string>();
    for (const u of updates)
      if (existsSync(join(archives, fileName(u)))) out.set(u, join(archives, fileName(u)));
    const fetch = updates.filter((u) => !out.has(u));
    if (fetch.length === 0) return out;
    this.letAptWrite(dir);
    const download = async (list: readonly PackageUpdate[]) => {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      const specs = list.map((u) => `${u.name}:${u.arch}=${u.new_version}`);
      const r = await runCommand("apt-get", ["-q", "download", ...specs], {
        env: this.env,
        timeoutMs: left,
        cwd: dir,
      });
      if (r.code === 0) return true;
      this.o.log?.warn({ packages: specs, errors: aptErrorLines(r) }, "apt-get download failed");
      return false;
    };
    const got = (u: PackageUpdate) => existsSync(join(dir, fileName(u)));
    // apt fetches what it can when one download fails, but refuses the whole batch when one version is
    // unknown: the packages still missing get one more try each, on their own.
    if (!(await download(fetch))) for (const u of fetch.filter((p) => !got(p))) await download([u]);
    for (const u of fetch) if (got(u)) out.set(u, join(dir, fileName(u)));
    return out;
  }

  private remember(key: string, value: { source: string; entries: ChangelogEntry[] } | undefined): void {
    if (this.changelogs.size >= CHANGELOG_CACHE_SIZE) {
      const oldest = this.changelogs.keys().next().value;
      if (oldest !== undefined) this.changelogs.delete(oldest);
    }
    this.changelogs.set(key, value);
  }

  /** apt downloads as the user `_apt` when run as root; it needs to write the folder, or it warns and downloads as root. */
  private letAptWrite(dir: string): void {
    if (process.getuid?.() !== 0) return;
    const entry = /^_apt:[^:]*:(\d+):(\d+):/m.exec(
      existsSync("/etc/passwd") ? readFileSync("/etc/passwd", "utf8") : "",
    );
    if (entry) chownSync(dir, Number(entry[1]), Number(entry[2]));
  }

  apply(type: UpdateType, listener?: ApplyListener): Promise<ApplyChanges> {
    return applyUpdates(this, type, listener);
  }

  download(type: UpdateType): Promise<DownloadResult> {
    return downloadUpdates(this, type);
  }

  async cachedFiles(): Promise<Map<string, number>> {
    return packageFilesIn((await this.aptPaths()).archives);
  }

  /**
   * dpkg left packages unpacked, half-configured or with triggers pending, or its journal unprocessed (what
   * apt refuses with "dpkg was interrupted"): `dpkg --configure -a` finishes them, run with apt's own dpkg
   * options (its root, its log) and the apply's configuration-file policy.
   */
  async recover(): Promise<Recovery | null> {
    const p = await this.aptPaths();
    const unfinished = [...(await this.packageStates()).values()]
      .filter((x) => UNFINISHED_STATES[x.state] !== undefined)
      .map((x) => `${x.name}:${x.arch} ${UNFINISHED_STATES[x.state]}`);
    const journal = readdirOrEmpty(join(dirname(p.status), "updates")).filter((f) => /^\d+$/.test(f));
    if (unfinished.length === 0 && journal.length === 0) return null;
    const dump = (await this.run("apt-config dump", "apt-config", ["dump"])).stdout;
    const dpkg = [...aptListOption(dump, "DPkg::Options"), "--force-confdef", "--force-confold"];
    const r = await this.run("dpkg --configure -a", p.dpkg, [...dpkg, "--configure", "-a"], true);
    const found = unfinished.slice(0, 10);
    return {
      command: "dpkg --configure -a",
      action: "ran",
      detail: `dpkg had been interrupted (${plural(unfinished.length, "package")} unfinished, ${plural(journal.length, "journal entry", "journal entries")}); \`dpkg --configure -a\` finished them`,
      lines: [...found, ...lastLines(r.stdout, 20 - found.length)],
    };
  }

  async upgrade(
    type: UpdateType,
    o: { downloadOnly?: boolean; progress?: (p: ApplyProgress) => void } = {},
  ): Promise<void> {
    // A held package's installed version is pinned above any candidate, so apt keeps it.
    const hold = this.o.hold.length
      ? `Package: ${this.o.hold.join(" ")}\nPin: release a=now\nPin-Priority: 1001\n\n`
      : "";
    const pins = type === "security" ? hold + SECURITY_PINS : hold;
    // Phasing, holds and kept-back packages are apt's own decisions: nothing here overrides them.
    // Security updates never remove a package (upgrade --with-new-pkgs); a full upgrade is dist-upgrade.
    const action = [
      ...(type === "security" ? ["upgrade", "--with-new-pkgs"] : ["dist-upgrade"]),
      ...(o.downloadOnly ? ["--download-only"] : []),
    ];
    await this.withPreferences(pins, (prefs) =>
      this.run(
        `apt-get ${action.join(" ")}`,
        "apt-get",
        [
          "-y",
          "-q",
          "-o",
          "Dpkg::Options::=--force-confdef",
          "-o",
          "Dpkg::Options::=--force-confold",
          ...(o.progress ? ["-o", "APT::Status-Fd=3"] : []),
          ...prefs,
          ...action,
        ],
        true,
        o.progress ? aptProgress(o.progress) : undefined,
      ),
    );
  }

  async installed(): Promise<Map<string, InstalledPackage>> {
    const out = new Map<string, InstalledPackage>();
    // n(ot installed) and c(onfig-files) are not installed.
    for (const [key, { name, arch, version, state }] of await this.packageStates())
      if (!"nc".includes(state)) out.set(key, { name, arch, version });
    return out;
  }

  /** Every package dpkg knows, with the state letter of its `db:Status-Abbrev` (`i`, `U`, `F`, ...). */
  private async packageStates(): Promise<Map<string, InstalledPackage & { state: string }>> {
    const { status } = await this.aptPaths();
    const r = await this.run("dpkg-query", "dpkg-query", [
      `--admindir=${dirname(status)}`,
      "-W",
      // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own field syntax, not a JS template
      "-f=${Package}\\t${Architecture}\\t${Version}\\t${db:Status-Abbrev}\\n",
    ]);
    const out = new Map<string, InstalledPackage & { state: string }>();
    for (const line of r.stdout.split("\n")) {
      const [name, arch, version, abbrev] = line.split("\t");
      if (!name || !arch || !version || !abbrev) continue;
      out.set(packageKey({ name, arch }), { name, arch, version, state: abbrev[1] ?? "n" });
    }
    return out;
  }

  async rebootRequired(): Promise<boolean> {
    if (existsSync(this.o.rebootRequiredFile)) return true;
    const nr = this.o.needrestart;
    if (nr === undefined || !existsSync(nr)) return false;
    const r = await runCommand(nr, ["-b", "-k"], { env: this.env, timeoutMs: this.o.commandTimeoutMs });
    if (r.code !== 0) throw commandFailed("needrestart -b -k", r, lastLines(r.stderr, 5));
    // 2: an ABI-compatible kernel upgrade is pending, 3: a newer kernel version is installed.
    const ksta = /^NEEDRESTART-KSTA:\s*(\d+)/m.exec(r.stdout)?.[1];
    return ksta === "2" || ksta === "3";
  }

  /** needrestart's batch output (`-r l`: list, never restart); undefined when it is not installed or turned off. */
  async servicesToRestart(): Promise<string[] | undefined> {
    const command =
      this.o.servicesCommand ??
      (this.o.needrestart !== undefined && existsSync(this.o.needrestart)
        ? [this.o.needrestart, "-b", "-r", "l"]
        : []);
    const [file, ...args] = command;
    if (file === undefined) return undefined;
    const r = await runCommand(file, args, { env: this.env, timeoutMs: this.o.commandTimeoutMs });
    if (r.code !== 0) throw commandFailed("needrestart -b -r l", r, lastLines(r.stderr, 5));
    return parseNeedrestartServices(r.stdout);
  }

  /** `apt-get --version` starts `apt 2.6.1 (amd64)`; it reads no package state. */
  async version(): Promise<string | undefined> {
    const r = await runCommand("apt-get", ["--version"], { env: this.env, timeoutMs: VERSION_TIMEOUT_MS });
    return r.code === 0 ? /^apt (\S+)/.exec(r.stdout)?.[1] : undefined;
  }

  private async simulate(
    options: readonly string[],
    pins: string,
    action: readonly string[] = ["dist-upgrade"],
  ): Promise<Map<string, SimulatedUpgrade>> {
    const r = await this.withPreferences(pins, (prefs) =>
      this.run(`apt-get -s ${action.join(" ")}`, "apt-get", ["-s", "-q", ...options, ...prefs, ...action]),
    );
    return parseSimulation(r.stdout);
  }

  /**
   * Runs `fn` with apt options that put `pins` ahead of the administrator's main preferences file (its
   * content is copied after them; `preferences.d` is still read). No pins: apt's own preferences as they are.
   */
  private async withPreferences<T>(pins: string, fn: (prefs: string[]) => Promise<T>): Promise<T> {
    if (pins === "") return fn([]);
    const { preferences } = await this.aptPaths();
    const admin = existsSync(preferences) ? readFileSync(preferences, "utf8") : "";
    const dir = mkdtempSync(join(tmpdir(), "hostkeeper-apt-"));
    try {
      const file = join(dir, "preferences");
      writeFileSync(file, `${pins}\n${admin}`, { mode: 0o644 });
      return await fn(["-o", `Dir::Etc::preferences=${file}`]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  /** Where apt's configuration (APT_CONFIG included) puts the dpkg status, preferences, cache and dpkg. */
  private aptPaths(): Promise<AptPaths> {
    this.paths ??= this.run("apt-config shell", "apt-config", [
      "shell",
      "STATUS",
      "Dir::State::status/f",
      "PREFS",
      "Dir::Etc::preferences/f",
      "ARCHIVES",
      "Dir::Cache::archives/d",
      "DPKG",
      "Dir::Bin::dpkg/f",
    ]).then(
      (r) => {
        const value = (name: string) => new RegExp(`^${name}='([^']*)'$`, "m").exec(r.stdout)?.[1];
        return {
          status: value("STATUS") ?? "/var/lib/dpkg/status",
          preferences: value("PREFS") ?? "/etc/apt/preferences",
          archives: value("ARCHIVES") ?? "/var/cache/apt/archives/",
          dpkg: value("DPKG") || "dpkg",
        };
      },
      (err: unknown) => {
        this.paths = undefined;
        throw err;
      },
    );
    return this.paths;
  }

  /** Runs an apt program; `label` names it in errors; `takesLock` waits for the lock held by others. */
  private async run(
    label: string,
    file: string,
    args: string[],
    takesLock = false,
    onLine?: (line: string, stream: "stdout" | "status") => void,
  ): Promise<CommandResult> {
    const o = { env: this.env, timeoutMs: this.o.commandTimeoutMs, onLine };
    const r = takesLock
      ? await runWaitingForLock(file, args, {
          ...o,
          lockTimeoutMs: this.o.lockTimeoutMs,
          lockHolder: aptLockHolder,
        })
      : await runCommand(file, args, o);
    if (r.code !== 0) throw commandFailed(label, r, aptErrorLines(r));
    return r;
  }
}

/** dpkg's states (second letter of `db:Status-Abbrev`) of a package it left unfinished. */
const UNFINISHED_STATES: Record<string, string> = {
  H: "half-installed",
  U: "unpacked",
  F: "half-configured",
  W: "triggers-awaited",
  t: "triggers-pending",
};

interface AptPaths {
  status: string;
  preferences: string;
  /** Where apt keeps downloaded packages (`Dir::Cache::archives`). */
  archives: string;
  /** The dpkg apt runs (`Dir::Bin::dpkg`). */
  dpkg: string;
}

function readdirOrEmpty(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
