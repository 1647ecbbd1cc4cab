import { join } from "node:path";
import { packageVersion, projectRoot } from "../paths.js";
import type { LockHolder } from "../system/errors.js";
import { aptLockHolder } from "../system/packages/apt-output.js";
import { type CommandResult, lastLines, runCommand } from "../system/packages/command.js";
import { CHILD_ENV, childEnv } from "../util/child-env.js";
import { fs } from "../util/node-builtins.js";

const { existsSync } = fs;

/**
 * The host as self-update sees it: which package format installed the agent, for which architecture, the
 * package manager's commands, and the transient systemd unit the install runs in. An adapter: it runs
 * `dpkg-query`, `dpkg-deb`, `rpm`, `systemd-run` and `systemctl`, nothing else.
 */
export type PackageFormat = "deb" | "rpm";

export interface HostFacts {
  format: PackageFormat;
  /** The architecture as the format names it: amd64/arm64 (deb), x86_64/aarch64 (rpm). */
  arch: string;
}

export interface PackageFields {
  name: string;
  version: string;
  arch: string;
}

export interface Ran {
  code: number | null;
  output: string;
  /** It failed because another program holds the package manager's lock (it did nothing yet). */
  locked?: boolean;
}

/** Where the packages put the agent. */
export const PACKAGED_ROOT = "/usr/lib/hostkeeper";
export const AGENT_UNIT = "hostkeeper.service";
const ARCHES: Record<PackageFormat, Record<string, string>> = {
  deb: { x64: "amd64", arm64: "arm64" },
  rpm: { x64: "x86_64", arm64: "aarch64" },
};

/**
 * Runs a command through the package managers' runner (system/packages/command.ts: its own process group,
 * stopped past `timeoutMs`) with their allow-listed environment; its exit code and its output (stdout then
 * stderr). A command that cannot start or is stopped answers a null code and the reason.
 */
async function run(
  file: string,
  args: readonly string[],
  timeoutMs = 60_000,
  lockHolder?: (r: CommandResult) => LockHolder | undefined,
): Promise<Ran> {
  const env = childEnv(process.env, CHILD_ENV.packages, {
    LANG: "C.UTF-8",
    DEBIAN_FRONTEND: "noninteractive",
  });
  try {
    const r = await runCommand(file, args, { env, timeoutMs });
    const locked = r.code !== 0 && lockHolder?.(r) !== undefined;
    return { code: r.code, output: `${r.stdout}${r.stderr}`, locked };
  } catch (err) {
    return { code: null, output: (err as Error).message };
  }
}

/** The file name a release holds for `version` in `format` on `arch`, as `npm run package` names it. */
export function packageFileName(format: PackageFormat, version: string, arch: string): string {
  return format === "deb" ? `hostkeeper_${version}_${arch}.deb` : `hostkeeper-${version}-1.${arch}.rpm`;
}

/** Compares two versions part by part (numbers as numbers): negative when `a` is older than `b`. */
export function compareVersions(a: string, b: string): number {
  const parts = (v: string) => v.split(/[.+~-]/);
  const [pa, pb] = [parts(a), parts(b)];
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const [x, y] = [pa[i] ?? "", pb[i] ?? ""];
    const [nx, ny] = [Number(x), Number(y)];
    const c =
      x !== "" && y !== "" && Number.isInteger(nx) && Number.isInteger(ny) ? nx - ny : x.localeCompare(y);
    if (c !== 0) return c;
  }
  return 0;
}

export class HostPackages {
  /** This process's version (its package.json). */
  readonly runningVersion = packageVersion();

  /**
   * The host's package format and architecture, or why self-update cannot run here: it needs the agent
   * installed from its package (under /usr/lib/hostkeeper, known to dpkg or rpm) and run by systemd.
   */
  async facts(): Promise<HostFacts | string> {
    if (projectRoot() !== PACKAGED_ROOT)
      return `this agent runs from ${projectRoot()}, not from ${PACKAGED_ROOT}`;
    if (!existsSync("/run/systemd/system") || process.env.INVOCATION_ID === undefined)
      return "this agent is not run by systemd";
    const format = await this.installedFormat();
    if (format === undefined) return "neither dpkg nor rpm knows the hostkeeper package";
    const arch = ARCHES[format][process.arch];
    if (arch === undefined) return `no package is built for ${process.arch}`;
    return { format, arch };
  }

  /** The installed package's version, when the package manager has it wholly installed. */
  async installedVersion(format: PackageFormat): Promise<string | undefined> {
    if (format === "deb") {
      // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own field syntax, not a JS template
      const r = await run("dpkg-query", ["-W", "-f=${Status} ${Version}", "hostkeeper"]);
      const m = /^install ok installed (\S+)$/.exec(r.output.trim());
      return r.code === 0 && m ? m[1] : undefined;
    }
    const r = await run("rpm", ["-q", "--qf", "%{VERSION}", "hostkeeper"]);
    return r.code === 0 ? r.output.trim() : undefined;
  }

  /** A package file's name, version and architecture, as its package manager reads them. */
  async fields(format: PackageFormat, file: string): Promise<PackageFields | string> {
    const r =
      format === "deb"
        ? await run("dpkg-deb", [
            // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-deb's own field syntax, not a JS template
            "--showformat=${Package}\\n${Version}\\n${Architecture}\\n",
            "-W",
            file,
          ])
        : await run("rpm", ["-qp", "--nosignature", "--qf", "%{NAME}\\n%{VERSION}\\n%{ARCH}\\n", file]);
    const [name, version, arch] = r.output.trim().split("\n");
    if (r.code !== 0 || !name || !version || !arch)
      return `it is not a readable ${format} package: ${tail(r.output)}`;
    return { name, version, arch };
  }

  /**
   * Installs `file` (an upgrade, a downgrade or the same version again), keeping changed config files. dpkg
   * refuses at once while another holds its lock (`locked`, told as apt's runs tell it); rpm waits for its own.
   */
  install(format: PackageFormat, file: string): Promise<Ran> {
    return format === "deb"
      ? run("dpkg", ["--force-confdef", "--force-confold", "-i", file], 600_000, aptLockHolder)
      : run("rpm", ["-U", "--oldpackage", "--replacepkgs", file], 600_000);
  }

  /**
   * Starts the updater in the transient unit `unit`, outside hostkeeper.service, so that it outlives the
   * agent's stop and start by the package's scripts. KillMode=process: were the updater killed, the package
   * manager it started finishes (one killed halfway leaves the package half installed).
   */
  async launch(unit: string, dir: string): Promise<void> {
    const script = join(PACKAGED_ROOT, "dist", "src", "agent-update", "updater-main.js");
    const r = await run("systemd-run", [
      `--unit=${unit}`,
      `--description=Hostkeeper agent update (${dir})`,
      "--collect",
      "--quiet",
      "--property=KillMode=process",
      "--setenv=LANG=C.UTF-8",
      "--setenv=DEBIAN_FRONTEND=noninteractive",
      "--",
      process.execPath,
      script,
      dir,
    ]);
    if (r.code !== 0) throw new Error(`systemd-run could not start the updater: ${tail(r.output)}`);
  }

  /**
   * Clears the agent's unit's failed state: a new agent that kept exiting may have hit systemd's start
   * limit, and the package scripts' restart of the previous version would then be refused.
   */
  resetFailed(): Promise<Ran> {
    return run("systemctl", ["reset-failed", AGENT_UNIT]);
  }

  /** Whether the transient unit still runs (a finished one is collected and reads inactive). */
  async running(unit: string): Promise<boolean> {
    const r = await run("systemctl", ["is-active", unit]);
    return ["active", "activating", "deactivating", "reloading"].includes(r.output.trim());
  }

  private async installedFormat(): Promise<PackageFormat | undefined> {
    for (const format of ["deb", "rpm"] as const) {
      const probe = format === "deb" ? "dpkg-query" : "rpm";
      if (!["/usr/bin", "/bin"].some((d) => existsSync(join(d, probe)))) continue;
      if ((await this.installedVersion(format)) !== undefined) return format;
    }
    return undefined;
  }
}

/** The last lines of a command's output, for a message. */
export function tail(output: string, lines = 5): string {
  return lastLines(output, lines).join(" | ").slice(-1000) || "(no output)";
}
