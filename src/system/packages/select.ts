import { delimiter, join } from "node:path";
import type { Logger } from "pino";
import type { AppConfig } from "../../settings.js";
import { fs } from "../../util/node-builtins.js";
import { CommandError } from "../errors.js";
import { AptPackageManager } from "./apt.js";
import { DnfPackageManager } from "./dnf.js";
import type { PackageManager } from "./package-manager.js";

const { accessSync, constants, readFileSync } = fs;

const APT_FAMILY = ["debian", "ubuntu"];
const DNF_FAMILY = ["rhel", "fedora", "centos", "almalinux", "rocky"];

/** Picks apt or dnf from os-release's ID and ID_LIKE, then from which of the two programs is installed. */
export function detectPackageManager(
  osRelease: string | undefined,
  installed: (program: string) => boolean,
): "apt" | "dnf" | undefined {
  const field = (name: string) =>
    new RegExp(`^${name}=("?)([^"\\n]*)\\1\\s*$`, "m")
      .exec(osRelease ?? "")?.[2]
      ?.toLowerCase()
      .split(/\s+/) ?? [];
  const ids = [...field("ID"), ...field("ID_LIKE")];
  if (ids.some((id) => APT_FAMILY.includes(id))) return "apt";
  if (ids.some((id) => DNF_FAMILY.includes(id))) return "dnf";
  if (installed("apt-get")) return "apt";
  if (installed("dnf")) return "dnf";
  return undefined;
}

function onPath(program: string): boolean {
  return (process.env.PATH ?? "").split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, program), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

function readOsRelease(): string | undefined {
  for (const path of ["/etc/os-release", "/usr/lib/os-release"]) {
    try {
      return readFileSync(path, "utf8");
    } catch {
      // try the next
    }
  }
  return undefined;
}

/** Answers every call with a problem: no supported package manager was found on this host. */
class NoPackageManager implements PackageManager {
  readonly name = "none" as const;
  private fail(): never {
    throw new CommandError(
      "no supported package manager (apt or dnf) was found on this host; set HOSTKEEPER_PACKAGE_MANAGER",
      { command: "apt-get or dnf" },
    );
  }
  check = async () => this.fail();
  apply = async () => this.fail();
  download = async () => this.fail();
  recover = async () => this.fail();
  rebootRequired = async () => this.fail();
  storage = async () => this.fail();
  spaceNeeded = async () => this.fail();
  version = async () => undefined;
}

/** The package manager of HOSTKEEPER_PACKAGE_MANAGER; the one place the adapter is chosen. */
export function createPackageManager(
  s: AppConfig["system"],
  env: NodeJS.ProcessEnv,
  log?: Pick<Logger, "warn">,
): PackageManager {
  const kind = s.packageManager === "auto" ? detectPackageManager(readOsRelease(), onPath) : s.packageManager;
  const common = {
    env,
    hold: s.holdPackages,
    lockTimeoutMs: s.lockTimeoutMs,
    commandTimeoutMs: s.commandTimeoutMs,
  };
  switch (kind) {
    case "apt":
      return new AptPackageManager({
        ...common,
        aptConfig: s.aptConfig,
        rebootRequiredFile: s.rebootRequiredFile,
        needrestart: s.needrestart,
        changelogTimeoutMs: s.aptChangelogTimeoutMs,
        log,
      });
    case "dnf":
      return new DnfPackageManager({ ...common, installroot: s.dnfInstallroot });
    case undefined:
      return new NoPackageManager();
  }
}
