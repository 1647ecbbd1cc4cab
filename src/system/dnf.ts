import { CHILD_ENV, childEnv } from "../util/child-env.js";
import { type CommandResult, commandFailed, lastLines, runCommand, runWaitingForLock } from "./command.js";
import type { LockHolder } from "./errors.js";
import {
  type ApplyChanges,
  applyUpdates,
  type InstalledPackage,
  type PackageManager,
  type PackageUpdate,
  packageKey,
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
 * dnf (RHEL, Fedora, Alma, Rocky). Security is what updateinfo security advisories name; a security apply
 * is `upgrade-minimal --security`, which installs exactly those versions (plain `upgrade --security` would
 * take the newest version of each such package, regular or not).
 */
export class DnfPackageManager implements PackageManager, UpgradeSteps {
  readonly name = "dnf" as const;
  private readonly env: NodeJS.ProcessEnv;
  private readonly base: string[];

  constructor(private readonly o: DnfOptions) {
    this.env = childEnv(o.env, CHILD_ENV.packages, { LC_ALL: "C" });
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

  apply(type: UpdateType): Promise<ApplyChanges> {
    return applyUpdates(this, type);
  }

  async upgrade(type: UpdateType): Promise<void> {
    const action = type === "security" ? ["upgrade-minimal", "--security"] : ["upgrade"];
    // --nobest: a package whose newest version cannot be installed (e.g. it needs a held one) is kept
    // back, as apt does, instead of failing the whole transaction.
    const exclude = this.o.hold.flatMap((name) => ["--exclude", name]);
    await this.run(`dnf ${action.join(" ")}`, ["-y", "--nobest", ...exclude, ...action]);
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
  private async run(label: string, args: string[]): Promise<CommandResult> {
    const r = await runWaitingForLock("dnf", [...this.base, ...args], {
      env: this.env,
      timeoutMs: this.o.commandTimeoutMs,
      lockTimeoutMs: this.o.lockTimeoutMs,
      lockHolder: dnfLockHolder,
    });
    if (r.code !== 0) throw commandFailed(label, r, dnfErrorLines(r));
    return r;
  }
}
