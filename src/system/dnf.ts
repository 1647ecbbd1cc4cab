import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type CommandResult, commandFailed, lastLines, runCommand, runWaitingForLock } from "./command.js";
import type { LockHolder } from "./errors.js";
import {
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

export interface DnfOptions {
  /** Environment of the agent; dnf runs with it in the C locale. */
  env: NodeJS.ProcessEnv;
  /** dnf `--installroot`; undefined manages this host. */
  installroot: string | undefined;
  hold: readonly string[];
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

/** `dnf updateinfo list` lines: `ADVISORY-ID  Severity/Sec.  name-[epoch:]version-release.arch`; the NEVRAs. */
export function advisoryPackages(stdout: string): string[] {
  return stdout
    .split("\n")
    .map((l) => l.trim().split(/\s+/))
    .filter((cols) => cols.length >= 3)
    .map((cols) => cols[cols.length - 1] as string);
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
  private readonly env: NodeJS.ProcessEnv;
  private readonly base: string[];

  constructor(private readonly o: DnfOptions) {
    this.env = { ...o.env, LC_ALL: "C" };
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
    const advisories = advisoryPackages(
      (await this.run("dnf updateinfo list", ["-C", "updateinfo", "list", "--security", "--updates"])).stdout,
    );
    // The highest version named by a security advisory, per package: what upgrade-minimal --security installs.
    const security = new Map<string, string>();
    if (advisories.length > 0) {
      const r = await this.run("dnf repoquery", [
        "-C",
        "repoquery",
        "--latest-limit=1",
        `--qf=${QF}`,
        "--",
        ...advisories,
      ]);
      for (const p of parseQuery(r.stdout)) security.set(packageKey(p), p.version);
    }
    return newest.map((u) => {
      const securityVersion = security.get(packageKey(u)) ?? null;
      return {
        name: u.name,
        arch: u.arch,
        current_version: installed.get(packageKey(u))?.version ?? "",
        new_version: u.version,
        security: securityVersion !== null,
        security_version: securityVersion,
        held: this.o.hold.includes(u.name),
      };
    });
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
