import { join } from "node:path";
import { CHILD_ENV, type ChildEnv, childEnv } from "../util/child-env.js";
import { fs } from "../util/node-builtins.js";
import { type CommandResult, commandFailed, lastLines, runCommand, runWaitingForLock } from "./command.js";
import type { LockHolder } from "./errors.js";
import {
  type Advisory,
  type AdvisoryType,
  type ApplyChanges,
  type ApplyListener,
  type ApplyProgress,
  applyUpdates,
  type DownloadResult,
  downloadUpdates,
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

const { existsSync, readFileSync } = fs;

export interface DnfOptions {
  /** Environment of the agent; dnf runs with it in the C locale. */
  env: NodeJS.ProcessEnv;
  /** dnf `--installroot`; undefined manages this host. */
  installroot: string | undefined;
  hold: readonly string[];
  /** Lists the services to restart instead of `dnf needs-restarting -s`; undefined: that; [] : not asked. */
  servicesCommand: readonly string[] | undefined;
  lockTimeoutMs: number;
  commandTimeoutMs: number;
}

const QF = "%{name}\\t%{arch}\\t%{evr}";

function parseQuery(stdout: string): InstalledPackage[] {
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

/** `dnf needs-restarting -s`: one systemd unit per line. */
export function parseUnits(stdout: string): string[] {
  return [
    ...new Set(
      stdout
        .split("\n")
        .map((l) => l.trim())
        .filter((l) => /^\S+\.[a-z]+$/.test(l)),
    ),
  ].sort();
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
    const dl = /^\((\d+)\/(\d+)\): \S+\.rpm\b/.exec(line);
    if (dl) return counter.downloaded(Number(dl[1]), Number(dl[2]));
    if (/^Running transaction\s*$/.test(line)) return counter.installed(undefined);
    const step = /^\s+(?:Installing|Upgrading|Downgrading|Reinstalling)\s+: (\S+)\s+\d+\/\d+/.exec(line);
    if (step) counter.installed(step[1]);
  };
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

/**
 * dnf (RHEL, Fedora, Alma, Rocky). Security is what updateinfo security advisories name; a security apply
 * is `upgrade-minimal --security`, which installs exactly those versions (plain `upgrade --security` would
 * take the newest version of each such package, regular or not).
 */
export class DnfPackageManager implements PackageManager, UpgradeSteps {
  readonly name = "dnf" as const;
  private readonly env: ChildEnv;
  private readonly base: string[];

  constructor(private readonly o: DnfOptions) {
    this.env = childEnv(o.env, CHILD_ENV.packages, { LC_ALL: "C", TZ: "UTC" });
    const root = o.installroot;
    this.base = [
      "-q",
      "--setopt=exit_on_lock=True",
      ...(root === undefined
        ? []
        : [
            `--installroot=${root}`,
            `--config=${root}/etc/dnf/dnf.conf`,
            `--setopt=reposdir=${root}/etc/yum.repos.d`,
            // Host plugins keep host paths whatever the root (e.g. `local` copies packages to /var/lib/dnf).
            "--disableplugin=*",
            "--enableplugin=needs-restarting",
            "--enableplugin=versionlock",
          ]),
    ];
  }

  async check(): Promise<PackageUpdate[]> {
    // Unreachable repositories fail the check, as apt's Error-Mode=any does.
    await this.run("dnf makecache", ["--setopt=skip_if_unavailable=False", "makecache", "--refresh"]);
    const newest = parseQuery(
      (
        await this.run("dnf repoquery --upgrades", [
          "-C",
          "repoquery",
          "--upgrades",
          "--latest-limit=1",
          `--qf=${QF}`,
        ])
      ).stdout,
    );
    if (newest.length === 0) return [];
    const installed = await this.installed();
    const listed = advisoryPackages(
      (await this.run("dnf updateinfo list", ["-C", "updateinfo", "list", "--updates"])).stdout,
    );
    const details =
      listed.length === 0
        ? new Map<string, Advisory>()
        : parseUpdateInfo(
            (await this.run("dnf updateinfo info", ["-C", "updateinfo", "info", "--updates"])).stdout,
          );
    const byPackage = new Map<string, Advisory[]>();
    for (const { id, nevra } of listed) {
      const key = nevraKey(nevra);
      const a = details.get(id);
      if (key === undefined || a === undefined) continue;
      const list = byPackage.get(key) ?? [];
      if (!list.some((b) => b.id === id)) list.push(a);
      byPackage.set(key, list);
    }
    const securityNevras = listed.filter((l) => l.security).map((l) => l.nevra);
    // The highest version named by a security advisory, per package: what upgrade-minimal --security installs.
    const security = new Map<string, string>();
    if (securityNevras.length > 0) {
      const r = await this.run("dnf repoquery", [
        "-C",
        "repoquery",
        "--latest-limit=1",
        `--qf=${QF}`,
        "--",
        ...securityNevras,
      ]);
      for (const p of parseQuery(r.stdout)) security.set(packageKey(p), p.version);
    }
    const locks = await this.versionLocks();
    return newest.map((u) => {
      const securityVersion = security.get(packageKey(u)) ?? null;
      const lock = locks.get(u.name);
      const held = this.o.hold.includes(u.name) || (lock !== undefined && lock !== u.version);
      return {
        name: u.name,
        arch: u.arch,
        current_version: installed.get(packageKey(u))?.version ?? "",
        new_version: u.version,
        security: securityVersion !== null,
        security_version: securityVersion,
        held,
        held_reason: held ? "hold" : null,
        advisories: byPackage.get(packageKey(u)) ?? [],
      };
    });
  }

  /** The versionlock plugin's locks; none when the plugin is not installed. */
  private async versionLocks(): Promise<Map<string, string>> {
    const r = await runWaitingForLock("dnf", [...this.base, "versionlock", "list"], {
      env: this.env,
      timeoutMs: this.o.commandTimeoutMs,
      lockTimeoutMs: this.o.lockTimeoutMs,
      lockHolder: dnfLockHolder,
    });
    if (r.code !== 0 && /No such command: versionlock/.test(r.stderr)) return new Map();
    if (r.code !== 0) throw commandFailed("dnf versionlock list", r, dnfErrorLines(r));
    return parseVersionLocks(r.stdout);
  }

  /** `dnf needs-restarting -s` (or the configured command): the systemd units running outdated files. */
  async servicesToRestart(): Promise<string[] | undefined> {
    const [file, args] =
      this.o.servicesCommand === undefined
        ? ["dnf", [...this.base, "needs-restarting", "-s"]]
        : [this.o.servicesCommand[0], this.o.servicesCommand.slice(1)];
    if (file === undefined) return undefined;
    const r = await runCommand(file, args, { env: this.env, timeoutMs: this.o.commandTimeoutMs });
    if (r.code !== 0) throw commandFailed("dnf needs-restarting -s", r, dnfErrorLines(r));
    return parseUnits(r.stdout);
  }

  apply(type: UpdateType, listener?: ApplyListener): Promise<ApplyChanges> {
    return applyUpdates(this, type, listener);
  }

  download(type: UpdateType): Promise<DownloadResult> {
    return downloadUpdates(this, type);
  }

  /** The packages under dnf's cache folder (`cachedir` of its configuration, inside the install root). */
  async cachedFiles(): Promise<Map<string, number>> {
    const root = this.o.installroot ?? "";
    const conf = join(root || "/", "etc/dnf/dnf.conf");
    const dir = dnfCacheDir(existsSync(conf) ? readFileSync(conf, "utf8") : "");
    return packageFilesIn(join(root || "/", dir));
  }

  /**
   * rpm transactions have no journal to finish: after an interrupted apply, what `dnf check` finds
   * (duplicates, broken dependencies) and the last transaction of `dnf history` are reported, and the apply
   * goes on; repairs like `dnf remove --duplicates` are the administrator's call.
   */
  async recover(afterInterruption: boolean): Promise<Recovery | null> {
    if (!afterInterruption) return null;
    const check = await runCommand("dnf", [...this.base, "--disablerepo=*", "check"], {
      env: this.env,
      timeoutMs: this.o.commandTimeoutMs,
    });
    const history = await runCommand("dnf", [...this.base, "--disablerepo=*", "history", "info", "last"], {
      env: this.env,
      timeoutMs: this.o.commandTimeoutMs,
    });
    const field = (name: string) =>
      new RegExp(`^${name}\\s*:\\s*(.+)$`, "m").exec(history.stdout)?.[1]?.trim() ?? "unknown";
    const problems = lastLines(`${check.stdout}\n${check.stderr}`, 20);
    return {
      command: "dnf check; dnf history info last",
      action: "reported",
      detail: `the previous apply was interrupted; last dnf transaction ${field("Transaction ID")}: return code ${field("Return-Code")}; dnf check ${check.code === 0 && problems.length === 0 ? "found no problem" : `found problems (exit ${check.code})`}`,
      lines: problems,
    };
  }

  async upgrade(
    type: UpdateType,
    o: { downloadOnly?: boolean; progress?: (p: ApplyProgress) => void } = {},
  ): Promise<void> {
    const action = [
      ...(type === "security" ? ["upgrade-minimal", "--security"] : ["upgrade"]),
      ...(o.downloadOnly ? ["--downloadonly"] : []),
    ];
    // --nobest: a package whose newest version cannot be installed (e.g. it needs a held one) is kept
    // back, as apt does, instead of failing the whole transaction.
    const exclude = this.o.hold.flatMap((name) => ["--exclude", name]);
    const onLine = o.progress ? dnfProgress(o.progress) : undefined;
    await this.run(`dnf ${action.join(" ")}`, ["-y", "--nobest", ...exclude, ...action], onLine);
  }

  async installed(): Promise<Map<string, InstalledPackage>> {
    const r = await this.run("dnf repoquery --installed", [
      "--disablerepo=*",
      "repoquery",
      "--installed",
      `--qf=${QF}`,
    ]);
    return new Map(parseQuery(r.stdout).map((p) => [packageKey(p), p]));
  }

  async rebootRequired(): Promise<boolean> {
    const args = [...this.base, "needs-restarting", "-r"];
    const r = await runCommand("dnf", args, { env: this.env, timeoutMs: this.o.commandTimeoutMs });
    // Exit 1 is also dnf's generic error, so the reboot verdict is read from the text.
    if (r.code === 1 && /Reboot is required/.test(r.stdout)) return true;
    if (r.code === 0) return false;
    throw commandFailed("dnf needs-restarting -r", r, dnfErrorLines(r));
  }

  /** `dnf -q --version` prints the version alone (in the install root, when there is one). */
  async version(): Promise<string | undefined> {
    const r = await runCommand("dnf", [...this.base, "--version"], {
      env: this.env,
      timeoutMs: VERSION_TIMEOUT_MS,
    });
    const first = r.stdout.trim().split("\n")[0]?.trim();
    return r.code === 0 && first ? first : undefined;
  }

  /** Runs dnf, waiting while another dnf holds its lock (queries take it too); `label` names it in errors. */
  private async run(label: string, args: string[], onLine?: (line: string) => void): Promise<CommandResult> {
    // Progress is read from dnf's own lines, which -q suppresses.
    const base = onLine ? this.base.filter((a) => a !== "-q") : this.base;
    const r = await runWaitingForLock("dnf", [...base, ...args], {
      env: this.env,
      onLine,
      timeoutMs: this.o.commandTimeoutMs,
      lockTimeoutMs: this.o.lockTimeoutMs,
      lockHolder: dnfLockHolder,
    });
    if (r.code !== 0) throw commandFailed(label, r, dnfErrorLines(r));
    return r;
  }
}
