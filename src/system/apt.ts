import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
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

export interface AptOptions {
  /** Environment of the agent; apt's variables are added to it. */
  env: NodeJS.ProcessEnv;
  /** Given to apt as APT_CONFIG; undefined leaves apt's own configuration. */
  aptConfig: string | undefined;
  hold: readonly string[];
  rebootRequiredFile: string;
  /** needrestart executable; used for the kernel status when it exists. */
  needrestart: string | undefined;
  lockTimeoutMs: number;
  commandTimeoutMs: number;
}

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
 * apt and dpkg (Debian, Ubuntu). The plan is read from `apt-get -s` (a stable output, unlike `apt list`);
 * security updates are found by simulating with security-only pinning, and installed the same way.
 */
export class AptPackageManager implements PackageManager, UpgradeSteps {
  readonly name = "apt" as const;
  private readonly env: NodeJS.ProcessEnv;
  private paths: Promise<{ status: string; preferences: string }> | undefined;

  constructor(private readonly o: AptOptions) {
    this.env = childEnv(o.env, CHILD_ENV.packages, {
      LC_ALL: "C",
      DEBIAN_FRONTEND: "noninteractive",
      APT_LISTCHANGES_FRONTEND: "none",
      // needrestart's apt hook only lists what would need a restart; it never restarts services or asks.
      NEEDRESTART_MODE: "l",
      ...(o.aptConfig === undefined ? {} : { APT_CONFIG: o.aptConfig }),
    });
  }

  async check(): Promise<PackageUpdate[]> {
    await this.run("apt-get update", "apt-get", ["-q", "-o", "APT::Update::Error-Mode=any", "update"], true);
    const newest = await this.simulate("");
    const security = await this.simulate(SECURITY_PINS);
    return [...newest.values()].map((u) => {
      const s = security.get(packageKey(u));
      const securityVersion = s?.security ? s.to : u.security ? u.to : null;
      return {
        name: u.name,
        arch: u.arch,
        current_version: u.from,
        new_version: u.to,
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
    // A held package's installed version is pinned above any candidate, so apt keeps it.
    const hold = this.o.hold.length
      ? `Package: ${this.o.hold.join(" ")}\nPin: release a=now\nPin-Priority: 1001\n\n`
      : "";
    const pins = type === "security" ? hold + SECURITY_PINS : hold;
    // Security updates never remove a package (upgrade --with-new-pkgs); a full upgrade is dist-upgrade.
    const action = type === "security" ? ["upgrade", "--with-new-pkgs"] : ["dist-upgrade"];
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
          ...prefs,
          ...action,
        ],
        true,
      ),
    );
  }

  async installed(): Promise<Map<string, InstalledPackage>> {
    const { status } = await this.aptPaths();
    const r = await this.run("dpkg-query", "dpkg-query", [
      `--admindir=${dirname(status)}`,
      "-W",
      // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own field syntax, not a JS template
      "-f=${Package}\\t${Architecture}\\t${Version}\\t${db:Status-Abbrev}\\n",
    ]);
    const out = new Map<string, InstalledPackage>();
    for (const line of r.stdout.split("\n")) {
      const [name, arch, version, abbrev] = line.split("\t");
      // The second letter is the package's state: n(ot installed) and c(onfig-files) are not installed.
      if (!name || !arch || !version || !abbrev || "nc".includes(abbrev[1] ?? "n")) continue;
      out.set(packageKey({ name, arch }), { name, arch, version });
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

  /** `apt-get --version` starts `apt 2.6.1 (amd64)`; it reads no package state. */
  async version(): Promise<string | undefined> {
    const r = await runCommand("apt-get", ["--version"], { env: this.env, timeoutMs: VERSION_TIMEOUT_MS });
    return r.code === 0 ? /^apt (\S+)/.exec(r.stdout)?.[1] : undefined;
  }

  private async simulate(pins: string): Promise<Map<string, SimulatedUpgrade>> {
    const r = await this.withPreferences(pins, (prefs) =>
      this.run("apt-get -s dist-upgrade", "apt-get", ["-s", "-q", ...prefs, "dist-upgrade"]),
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

  /** Where apt's configuration (APT_CONFIG included) puts the dpkg status file and the preferences file. */
  private aptPaths(): Promise<{ status: string; preferences: string }> {
    this.paths ??= this.run("apt-config shell", "apt-config", [
      "shell",
      "STATUS",
      "Dir::State::status/f",
      "PREFS",
      "Dir::Etc::preferences/f",
    ]).then(
      (r) => {
        const value = (name: string) => new RegExp(`^${name}='([^']*)'$`, "m").exec(r.stdout)?.[1];
        return {
          status: value("STATUS") ?? "/var/lib/dpkg/status",
          preferences: value("PREFS") ?? "/etc/apt/preferences",
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
  private async run(label: string, file: string, args: string[], takesLock = false): Promise<CommandResult> {
    const o = { env: this.env, timeoutMs: this.o.commandTimeoutMs };
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
