import { join } from "node:path";
import { CHILD_ENV, type ChildEnv, childEnv } from "../../util/child-env.js";
import { fs } from "../../util/node-builtins.js";
import { type CommandResult, commandFailed, lastLines, runCommand, runWaitingForLock } from "./command.js";
import {
  advisoryPackages,
  dnfCacheDir,
  dnfErrorLines,
  dnfLockHolder,
  dnfProgress,
  nevraKey,
  parseDnfTransaction,
  parseQuery,
  parseUpdateInfo,
  parseVersionLocks,
  QF,
} from "./dnf-output.js";
import {
  type Advisory,
  type ApplyChanges,
  type ApplyListener,
  type ApplyProgress,
  applyUpdates,
  type DownloadListener,
  type DownloadResult,
  downloadUpdates,
  type InstalledPackage,
  type PackageManager,
  type PackageUpdate,
  packageFilesIn,
  packageKey,
  type Recovery,
  type SpaceNeeded,
  type StoragePaths,
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
  lockTimeoutMs: number;
  commandTimeoutMs: number;
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

  apply(type: UpdateType, listener?: ApplyListener, exclude?: readonly string[]): Promise<ApplyChanges> {
    return applyUpdates(this, type, listener, exclude);
  }

  download(
    type: UpdateType,
    listener?: DownloadListener,
    exclude?: readonly string[],
  ): Promise<DownloadResult> {
    return downloadUpdates(this, type, listener, exclude);
  }

  /** The packages under dnf's cache folder (`cachedir` of its configuration, inside the install root). */
  async cachedFiles(): Promise<Map<string, number>> {
    return packageFilesIn((await this.storage()).cache);
  }

  async storage(): Promise<StoragePaths> {
    const root = this.o.installroot ?? "/";
    const conf = join(root, "etc/dnf/dnf.conf");
    return { root, cache: join(root, dnfCacheDir(existsSync(conf) ? readFileSync(conf, "utf8") : "")) };
  }

  /**
   * `dnf --assumeno` on the cached metadata: what the upgrade would download, and the installed size of
   * every package it writes (`repoquery %{installsize}`), counted as if nothing were freed: dnf prints the
   * growth of installonly packages (kernels) only.
   */
  async spaceNeeded(type: UpdateType): Promise<SpaceNeeded> {
    const { options, action } = this.upgradeOf(type);
    const args = [...this.base.filter((a) => a !== "-q"), "-C", "--assumeno", ...options, ...action];
    const r = await runCommand("dnf", args, { env: this.env, timeoutMs: this.o.commandTimeoutMs });
    // --assumeno ends every plan with exit 1 ("Operation aborted."); the plan is what shows it worked.
    if (!/^(Transaction Summary|Nothing to do\.)\s*$/m.test(r.stdout))
      throw commandFailed(`dnf --assumeno ${action.join(" ")}`, r, dnfErrorLines(r));
    const { downloadBytes, packages } = parseDnfTransaction(r.stdout);
    if (packages.length === 0) return { downloadBytes, installBytes: 0 };
    // repoquery prints each distinct line once: the package is on the line with its size.
    const sizes = await this.run("dnf repoquery", [
      "-C",
      "repoquery",
      "--qf=%{name}-%{evr}.%{arch}\t%{installsize}",
      "--",
      ...packages,
    ]);
    const installBytes = sizes.stdout
      .split("\n")
      .map((l) => /\t(\d+)$/.exec(l)?.[1])
      .reduce((n, size) => n + Number(size ?? 0), 0);
    return { downloadBytes, installBytes };
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
    o: { downloadOnly?: boolean; progress?: (p: ApplyProgress) => void; exclude?: readonly string[] } = {},
  ): Promise<void> {
    const plan = this.upgradeOf(type, o.exclude);
    const action = [...plan.action, ...(o.downloadOnly ? ["--downloadonly"] : [])];
    const onLine = o.progress ? dnfProgress(o.progress) : undefined;
    await this.run(`dnf ${action.join(" ")}`, ["-y", ...plan.options, ...action], onLine);
  }

  /** The options and the action of an upgrade of `type`, `exclude` (globs) kept out as held ones are. */
  private upgradeOf(
    type: UpdateType,
    exclude: readonly string[] = [],
  ): { options: string[]; action: string[] } {
    // --nobest: a package whose newest version cannot be installed (e.g. it needs a held one) is kept
    // back, as apt does, instead of failing the whole transaction.
    return {
      options: ["--nobest", ...[...this.o.hold, ...exclude].flatMap((name) => ["--exclude", name])],
      action: type === "security" ? ["upgrade-minimal", "--security"] : ["upgrade"],
    };
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
