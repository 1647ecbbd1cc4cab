import type { Logger } from "pino";
import { CHILD_ENV, childEnv } from "../../util/child-env.js";
import { fs } from "../../util/node-builtins.js";
import { AptAdvisories } from "./apt-advisories.js";
import { AptCommands } from "./apt-commands.js";
import { aptProgress, parseAptSpace, type SimulatedUpgrade } from "./apt-output.js";
import { finishInterruptedDpkg } from "./apt-recovery.js";
import { commandFailed, lastLines } from "./command.js";
import {
  type ApplyChanges,
  type ApplyListener,
  type ApplyProgress,
  applyUpdates,
  type DownloadListener,
  type DownloadResult,
  downloadUpdates,
  type HeldReason,
  type InstalledPackage,
  type PackageManager,
  type PackageUpdate,
  packageFilesIn,
  type Recovery,
  type SpaceNeeded,
  type StoragePaths,
  type UpdateType,
  type UpgradeSteps,
  VERSION_TIMEOUT_MS,
} from "./package-manager.js";

const { existsSync } = fs;

export interface AptOptions {
  /** Environment of the agent; apt's variables are added to it. */
  env: NodeJS.ProcessEnv;
  /** Given to apt as APT_CONFIG; undefined leaves apt's own configuration. */
  aptConfig: string | undefined;
  hold: readonly string[];
  rebootRequiredFile: string;
  /** needrestart executable; used for the kernel status when it exists. */
  needrestart: string | undefined;
  /** Bound on reading the changelogs of one check (downloads included); 0 reads none. */
  changelogTimeoutMs: number;
  lockTimeoutMs: number;
  commandTimeoutMs: number;
  log?: Pick<Logger, "warn">;
}

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

/**
 * apt and dpkg (Debian, Ubuntu). The plan is read from `apt-get -s` (a stable output, unlike `apt list`);
 * security updates are found by simulating with security-only pinning, and installed the same way.
 */
export class AptPackageManager implements PackageManager, UpgradeSteps {
  readonly name = "apt" as const;
  private readonly apt: AptCommands;
  private readonly advisories: AptAdvisories;

  constructor(private readonly o: AptOptions) {
    const env = childEnv(o.env, CHILD_ENV.packages, {
      LC_ALL: "C",
      DEBIAN_FRONTEND: "noninteractive",
      APT_LISTCHANGES_FRONTEND: "none",
      // needrestart's apt hook only lists what would need a restart; it never restarts services or asks.
      NEEDRESTART_MODE: "l",
      ...(o.aptConfig === undefined ? {} : { APT_CONFIG: o.aptConfig }),
    });
    this.apt = new AptCommands({ env, lockTimeoutMs: o.lockTimeoutMs, commandTimeoutMs: o.commandTimeoutMs });
    this.advisories = new AptAdvisories({
      apt: this.apt,
      // dpkg-deb reads the changelogs: no apt variables, the C locale.
      dpkgDebEnv: childEnv(o.env, CHILD_ENV.packages, { LC_ALL: "C" }),
      timeoutMs: o.changelogTimeoutMs,
      log: o.log,
    });
  }

  async check(): Promise<PackageUpdate[]> {
    await this.apt.run(
      "apt-get update",
      "apt-get",
      ["-q", "-o", "APT::Update::Error-Mode=any", "update"],
      true,
    );
    // Every update, held and phased ones included; then what each apply would really install.
    const newest = await this.apt.simulate(SEE_ALL, "");
    const security = await this.apt.simulate(SEE_ALL, SECURITY_PINS);
    const full = await this.apt.simulate([], "");
    const securityApply = await this.apt.simulate([], SECURITY_PINS, ["upgrade", "--with-new-pkgs"]);
    const marked = await this.apt.markedHold();
    const notInFull = [...newest.keys()].filter((k) => !full.has(k));
    // Only apt's phasing decides whether an update is phased: what a simulation without it would take.
    const phased =
      notInFull.length > 0
        ? await this.apt.simulate(["-o", "APT::Get::Always-Include-Phased-Updates=true"], "")
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
    await this.advisories.addTo(updates);
    return updates;
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

  async cachedFiles(): Promise<Map<string, number>> {
    return packageFilesIn((await this.apt.aptPaths()).archives);
  }

  /** Finishes what an interrupted dpkg left (see `finishInterruptedDpkg`), whether or not the agent's apply was cut short. */
  recover(): Promise<Recovery | null> {
    return finishInterruptedDpkg(this.apt);
  }

  /** The pins and the action of an upgrade of `type`, keeping `exclude` (globs) as held ones. */
  private upgradeOf(type: UpdateType, exclude: readonly string[] = []): { pins: string; action: string[] } {
    // A held package's installed version is pinned above any candidate, so apt keeps it; so is an excluded one.
    const kept = [...this.o.hold, ...exclude];
    const hold = kept.length ? `Package: ${kept.join(" ")}\nPin: release a=now\nPin-Priority: 1001\n\n` : "";
    // Phasing, holds and kept-back packages are apt's own decisions: nothing here overrides them.
    // Security updates never remove a package (upgrade --with-new-pkgs); a full upgrade is dist-upgrade.
    return {
      pins: type === "security" ? hold + SECURITY_PINS : hold,
      action: type === "security" ? ["upgrade", "--with-new-pkgs"] : ["dist-upgrade"],
    };
  }

  async storage(): Promise<StoragePaths> {
    const { root, archives } = await this.apt.aptPaths();
    return { root, cache: archives };
  }

  /** `apt-get --print-uris`: the same plan and sizes as the upgrade would print, without the lock or a download. */
  async spaceNeeded(type: UpdateType): Promise<SpaceNeeded> {
    const { pins, action } = this.upgradeOf(type);
    const r = await this.apt.withPreferences(pins, (prefs) =>
      this.apt.run(`apt-get --print-uris ${action.join(" ")}`, "apt-get", [
        "-y",
        "-q",
        "--print-uris",
        ...prefs,
        ...action,
      ]),
    );
    return parseAptSpace(r.stdout);
  }

  async upgrade(
    type: UpdateType,
    o: { downloadOnly?: boolean; progress?: (p: ApplyProgress) => void; exclude?: readonly string[] } = {},
  ): Promise<void> {
    const plan = this.upgradeOf(type, o.exclude);
    const pins = plan.pins;
    const action = [...plan.action, ...(o.downloadOnly ? ["--download-only"] : [])];
    await this.apt.withPreferences(pins, (prefs) =>
      this.apt.run(
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
    for (const [key, { name, arch, version, state }] of await this.apt.packageStates())
      if (!"nc".includes(state)) out.set(key, { name, arch, version });
    return out;
  }

  async rebootRequired(): Promise<boolean> {
    if (existsSync(this.o.rebootRequiredFile)) return true;
    const nr = this.o.needrestart;
    if (nr === undefined || !existsSync(nr)) return false;
    const r = await this.apt.exec(nr, ["-b", "-k"]);
    if (r.code !== 0) throw commandFailed("needrestart -b -k", r, lastLines(r.stderr, 5));
    // 2: an ABI-compatible kernel upgrade is pending, 3: a newer kernel version is installed.
    const ksta = /^NEEDRESTART-KSTA:\s*(\d+)/m.exec(r.stdout)?.[1];
    return ksta === "2" || ksta === "3";
  }

  /** `apt-get --version` starts `apt 2.6.1 (amd64)`; it reads no package state. */
  async version(): Promise<string | undefined> {
    const r = await this.apt.exec("apt-get", ["--version"], { timeoutMs: VERSION_TIMEOUT_MS });
    return r.code === 0 ? /^apt (\S+)/.exec(r.stdout)?.[1] : undefined;
  }
}
