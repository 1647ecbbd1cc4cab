import { isAbsolute } from "node:path";
import { parse, setting } from "../config.js";
import { fs } from "../util/node-builtins.js";

const absolutePath = (raw: unknown): string => {
  const s = parse.string({ nonEmpty: true })(raw);
  if (!isAbsolute(s)) throw new Error(`must be an absolute path, got "${s}"`);
  return s;
};

const optionalAbsolutePath = (raw: unknown): string | undefined => {
  const s = parse.optionalString(raw);
  return s === undefined ? undefined : absolutePath(s);
};

/**
 * apt reads its own configuration, and so manages this host's packages, when the file `APT_CONFIG` names
 * is missing: a sandbox's configuration that is not there must stop the agent, not hand it the host.
 */
const aptConfigFile = (raw: unknown): string | undefined => {
  const path = optionalAbsolutePath(raw);
  if (path !== undefined && !fs.existsSync(path))
    throw new Error(
      `names ${path}, which does not exist: apt would read the host's own configuration instead and manage this host's packages`,
    );
  return path;
};

export const systemSettings = {
  packageManager: setting({
    key: "packageManager",
    env: "HOSTKEEPER_PACKAGE_MANAGER",
    area: "system",
    doc: "Package manager for system updates: `apt`, `dnf`, or `auto` (from `/etc/os-release`, then from which of `apt-get` and `dnf` is installed).",
    defaultText: "auto",
    default: "auto" as const,
    parse: parse.enumOf(["auto", "apt", "dnf"] as const),
  }),
  holdPackages: setting({
    key: "holdPackages",
    env: "HOSTKEEPER_HOLD_PACKAGES",
    area: "system",
    doc: "Comma-separated package names that apply-updates never upgrades (e.g. a container runtime); they are reported as held back.",
    defaultText: "none",
    default: [] as string[],
    parse: (raw) => {
      const list = parse.list(raw);
      for (const name of list)
        if (!/^[A-Za-z0-9][A-Za-z0-9+._:-]*$/.test(name)) throw new Error(`"${name}" is not a package name`);
      return list;
    },
  }),
  lockTimeoutMs: setting({
    key: "packageLockTimeoutMs",
    env: "HOSTKEEPER_PACKAGE_LOCK_TIMEOUT_MS",
    area: "system",
    doc: "How long check and apply wait for the package manager's lock (held by another program, or by another apply of this agent) before they fail as busy.",
    defaultText: "300000",
    default: 300_000,
    parse: parse.int(0, 3_600_000),
  }),
  commandTimeoutMs: setting({
    key: "packageCommandTimeoutMs",
    env: "HOSTKEEPER_PACKAGE_COMMAND_TIMEOUT_MS",
    area: "system",
    doc: "Time-out of one package-manager command (an upgrade may take minutes); on expiry the command is stopped and the request fails.",
    defaultText: "1200000",
    default: 1_200_000,
    parse: parse.int(1000, 24 * 3_600_000),
  }),
  rebootRequiredFile: setting({
    key: "rebootRequiredFile",
    env: "HOSTKEEPER_REBOOT_REQUIRED_FILE",
    area: "system",
    doc: "apt hosts: the flag file whose presence means a reboot is required (Debian Policy).",
    defaultText: "/run/reboot-required",
    default: "/run/reboot-required",
    parse: absolutePath,
  }),
  needrestart: setting({
    key: "needrestart",
    env: "HOSTKEEPER_NEEDRESTART",
    area: "system",
    doc: "apt hosts: needrestart executable whose kernel status (`needrestart -b -k`) also decides `reboot_required` when it is installed; `none` turns this off.",
    defaultText: "/usr/sbin/needrestart",
    default: "/usr/sbin/needrestart" as string | undefined,
    parse: (raw) => (parse.string()(raw) === "none" ? undefined : absolutePath(raw)),
  }),
  servicesRestartCommand: setting({
    key: "servicesRestartCommand",
    env: "HOSTKEEPER_SERVICES_RESTART_COMMAND",
    area: "system",
    doc: "How check and apply find `services_restart_required`: `auto` is the agent's own read-only scan of `/proc` (processes mapping replaced or deleted files, by systemd unit); `none` finds nothing (the field is null); else a command, split at whitespace (no shell), such as `needrestart -b -r l` or `dnf needs-restarting -s`, whose units are listed without processes or files.",
    defaultText: "auto",
    default: undefined as string[] | undefined,
    parse: (raw) => {
      const s = parse.string({ nonEmpty: true })(raw);
      if (s === "auto") return undefined;
      return s === "none" ? [] : s.split(/\s+/);
    },
    show: (argv) => (argv === undefined ? "auto" : argv.length === 0 ? "none" : argv.join(" ")),
  }),
  minFreeMb: setting({
    key: "minFreeMb",
    env: "HOSTKEEPER_MIN_FREE_MB",
    area: "system",
    doc: "Disk guard: MB (MiB) to keep free on each filesystem a download or apply writes (package cache, `/`, `/usr`, `/var`, `/boot`), beyond what the package manager says it needs; short of it, they are refused (507).",
    defaultText: "500",
    default: 500,
    parse: parse.int(0, 1_000_000_000),
  }),
  aptChangelogTimeoutMs: setting({
    key: "aptChangelogTimeoutMs",
    env: "HOSTKEEPER_APT_CHANGELOG_TIMEOUT_MS",
    area: "system",
    doc: "apt hosts: how long one check may spend downloading and reading the changelogs of new versions (for `advisories`); what is not read by then has no advisories. `0` reads none.",
    defaultText: "120000",
    default: 120_000,
    parse: parse.int(0, 3_600_000),
  }),
  rebootCommand: setting({
    key: "rebootCommand",
    env: "HOSTKEEPER_REBOOT_COMMAND",
    area: "system",
    doc: "Command run for `auto_reboot`, split at whitespace into arguments (no shell).",
    defaultText: "systemctl reboot",
    default: ["systemctl", "reboot"],
    parse: (raw) => parse.string({ nonEmpty: true })(raw).split(/\s+/),
    show: (argv) => argv.join(" "),
  }),
  rebootDelayMs: setting({
    key: "rebootDelayMs",
    env: "HOSTKEEPER_REBOOT_DELAY_MS",
    area: "system",
    doc: "Delay between the end of an apply that schedules a reboot (when its apply-updates response is sent) and the reboot command; the reboot is cancelled if the agent stops first.",
    defaultText: "5000",
    default: 5_000,
    parse: parse.int(0, 3_600_000),
  }),
  hooksDir: setting({
    key: "hooksDir",
    env: "HOSTKEEPER_HOOKS_DIR",
    area: "system",
    doc: "The host's hooks: executables in its `pre-apply/`, `post-apply/` and `post-reboot/` folders run around applies, in name order; each file and every folder above it must be root's and writable by no one else. See docs/api/system-updates.md.",
    defaultText: "/etc/hostkeeper/hooks.d",
    default: "/etc/hostkeeper/hooks.d",
    parse: absolutePath,
  }),
  hookTimeoutS: setting({
    key: "hookTimeoutS",
    env: "HOSTKEEPER_HOOK_TIMEOUT_S",
    area: "system",
    doc: "How long one hook may run before it is stopped (SIGTERM to its process group, SIGKILL 5 s later); a pre-apply hook stopped so refuses the apply.",
    defaultText: "300",
    default: 300,
    parse: parse.int(1, 86_400),
  }),
  bootIdFile: setting({
    key: "bootIdFile",
    env: "HOSTKEEPER_BOOT_ID_FILE",
    area: "system",
    doc: "File holding the kernel's boot id; a new value at start means the host rebooted (an apply's scheduled reboot is then `back_online`, any other reboot is recorded as unplanned).",
    defaultText: "/proc/sys/kernel/random/boot_id",
    default: "/proc/sys/kernel/random/boot_id",
    parse: absolutePath,
  }),
  kernelReleaseFile: setting({
    key: "kernelReleaseFile",
    env: "HOSTKEEPER_KERNEL_RELEASE_FILE",
    area: "system",
    doc: "File holding the running kernel's release (what `uname -r` prints), reported before and after a reboot.",
    defaultText: "/proc/sys/kernel/osrelease",
    default: "/proc/sys/kernel/osrelease",
    parse: absolutePath,
  }),
  aptConfig: setting({
    key: "aptConfig",
    env: "HOSTKEEPER_APT_CONFIG",
    area: "system",
    doc: "apt configuration file given to apt as `APT_CONFIG` (e.g. a sandbox root); unset, apt reads its own. A file that does not exist is a configuration error (apt would silently read the host's own), and every apt command the agent runs checks that it is still there.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: aptConfigFile,
  }),
  dnfInstallroot: setting({
    key: "dnfInstallroot",
    env: "HOSTKEEPER_DNF_INSTALLROOT",
    area: "system",
    doc: "dnf `--installroot`; set, dnf reads only `<root>/etc/dnf/dnf.conf` and `<root>/etc/yum.repos.d` and loads no host plugin but needs-restarting and versionlock. Unset, dnf manages this host.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: optionalAbsolutePath,
  }),
};
