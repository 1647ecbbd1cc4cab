import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { ChildEnv } from "../../util/child-env.js";
import { fs } from "../../util/node-builtins.js";
import { CommandError } from "../errors.js";
import { aptErrorLines, aptLockHolder, parseSimulation, type SimulatedUpgrade } from "./apt-output.js";
import { type CommandResult, commandFailed, runCommand, runWaitingForLock } from "./command.js";
import { type InstalledPackage, packageKey } from "./package-manager.js";

const { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } = fs;

export interface AptCommandsOptions {
  /** apt's environment: allow-listed, with apt's own variables. */
  env: ChildEnv;
  lockTimeoutMs: number;
  commandTimeoutMs: number;
}

/** Where apt's configuration (APT_CONFIG included) puts what the agent reads and runs. */
export interface AptPaths {
  /** apt's root (`Dir`): `/`, or a sandbox's. */
  root: string;
  /** dpkg's status file (`Dir::State::status`). */
  status: string;
  preferences: string;
  /** Where apt keeps downloaded packages (`Dir::Cache::archives`). */
  archives: string;
  /** The dpkg apt runs (`Dir::Bin::dpkg`). */
  dpkg: string;
}

/** A package as dpkg knows it, with the state letter of its `db:Status-Abbrev` (`i`, `U`, `F`, ...). */
export type DpkgPackage = InstalledPackage & { state: string };

/**
 * apt's and dpkg's programs as the apt adapter runs them: with apt's environment and the command time-out,
 * waiting for the lock held by other programs where a command takes it, failing with apt's own error lines.
 */
export class AptCommands {
  private paths: Promise<AptPaths> | undefined;

  constructor(private readonly o: AptCommandsOptions) {}

  /** Runs a program with apt's environment; its exit is the caller's to read. */
  exec(file: string, args: readonly string[], o: { timeoutMs?: number; cwd?: string } = {}) {
    this.guardConfig(file);
    return runCommand(file, args, {
      env: this.o.env,
      timeoutMs: o.timeoutMs ?? this.o.commandTimeoutMs,
      cwd: o.cwd,
    });
  }

  /** Runs an apt program; `label` names it in errors; `takesLock` waits for the lock held by others. */
  async run(
    label: string,
    file: string,
    args: string[],
    takesLock = false,
    onLine?: (line: string, stream: "stdout" | "status") => void,
  ): Promise<CommandResult> {
    this.guardConfig(label);
    const o = { env: this.o.env, timeoutMs: this.o.commandTimeoutMs, onLine };
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

  /**
   * Refuses to run anything when the `APT_CONFIG` file is gone: apt would read the host's own configuration
   * and change this host's packages. Checked at start too (settings); this covers a file removed since.
   */
  private guardConfig(command: string): void {
    const conf = this.o.env.APT_CONFIG;
    if (conf !== undefined && !existsSync(conf))
      throw new CommandError(
        `${command} was not run: its APT_CONFIG file ${conf} is missing, and apt would manage this host's packages instead`,
        { command },
      );
  }

  /** The upgrades `apt-get -s <action>` plans with `options` and `pins` (see `withPreferences`). */
  async simulate(
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
  async withPreferences<T>(pins: string, fn: (prefs: string[]) => Promise<T>): Promise<T> {
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

  /** Packages marked with `apt-mark hold`, as `name` or `name:arch`. */
  async markedHold(): Promise<Set<string>> {
    const r = await this.run("apt-mark showhold", "apt-mark", ["showhold"]);
    return new Set(
      r.stdout
        .split("\n")
        .map((l) => l.trim())
        .filter(Boolean),
    );
  }

  /** Every package dpkg knows, keyed by `packageKey`. */
  async packageStates(): Promise<Map<string, DpkgPackage>> {
    const { status } = await this.aptPaths();
    const r = await this.run("dpkg-query", "dpkg-query", [
      `--admindir=${dirname(status)}`,
      "-W",
      // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own field syntax, not a JS template
      "-f=${Package}\\t${Architecture}\\t${Version}\\t${db:Status-Abbrev}\\n",
    ]);
    const out = new Map<string, DpkgPackage>();
    for (const line of r.stdout.split("\n")) {
      const [name, arch, version, abbrev] = line.split("\t");
      if (!name || !arch || !version || !abbrev) continue;
      out.set(packageKey({ name, arch }), { name, arch, version, state: abbrev[1] ?? "n" });
    }
    return out;
  }

  /** Where apt's configuration puts the dpkg status, preferences, cache and dpkg; asked once (again after a failure). */
  aptPaths(): Promise<AptPaths> {
    this.paths ??= this.run("apt-config shell", "apt-config", [
      "shell",
      "ROOT",
      "Dir/d",
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
          root: value("ROOT") ?? "/",
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
}
