import type { LockHolder } from "../errors.js";
import { type CommandResult, lastLines } from "./command.js";
import { type ApplyProgress, packageKey, progressCounter } from "./package-manager.js";

/* What apt's programs print, read: simulations, lock and error messages, progress, configuration dumps. */

/** A planned change of `apt-get -s`: `Inst name [old] (new Label:Version/Suite, ... [arch])`. */
export interface SimulatedUpgrade {
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

/** apt's sizes (`SizeToStr`): `5038 B`, `12.3 kB`, `1,024 MB`, in powers of 1000. */
function aptBytes(number: string, unit: string): number {
  return Math.round(Number(number.replaceAll(",", "")) * 1000 ** " kMGTPEZY".indexOf(unit || " "));
}

/**
 * What `apt-get --print-uris` (like a real run) says before it would start: `Need to get 0 B/5038 B of
 * archives.` (still to fetch, of the whole), `After this operation, 307 kB of additional disk space will be
 * used.` (or `... disk space will be freed.`). Nothing to do prints neither: zero.
 */
export function parseAptSpace(stdout: string): { downloadBytes: number; installBytes: number } {
  const get = /^Need to get ([\d.,]+) ([kMGTPEZY]?)B\b/m.exec(stdout);
  const used = /^After this operation, ([\d.,]+) ([kMGTPEZY]?)B of additional disk space will be used/m.exec(
    stdout,
  );
  return {
    downloadBytes: get ? aptBytes(get[1] ?? "0", get[2] ?? "") : 0,
    installBytes: used ? aptBytes(used[1] ?? "0", used[2] ?? "") : 0,
  };
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
  // dpkg run directly (`dpkg --configure -a`).
  const d = /(dpkg (?:frontend )?lock) was locked by another process with pid (\d+)/.exec(text);
  if (d) return { lock: `the ${d[1]}`, pid: Number(d[2]), name: undefined };
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
 * Progress of an apt-get run from its output: the plan line on stdout gives how many packages it installs,
 * `APT::Status-Fd` lines the downloads (`dlstatus:N:PERCENT:Retrieving file I of T`) and dpkg's steps
 * (`pmstatus:PKG:PERCENT:Installed PKG (arch)`); the package fetched now is named by stdout's `Get:` lines
 * (a `file:` source has none: apt reads its packages in place).
 */
export function aptProgress(progress: ((p: ApplyProgress) => void) | undefined) {
  const counter = progressCounter(progress);
  return (line: string, stream: "stdout" | "status") => {
    if (stream === "stdout") {
      const plan = /^(\d+) upgraded, (\d+) newly installed, /.exec(line);
      if (plan) counter.setInstallTotal(Number(plan[1]) + Number(plan[2]));
      // `Get:1 URI suite/component arch name arch version [size]`
      const get = /^Get:\d+ .* (\S+) \S+ \S+ \[[^\]]*\]$/.exec(line);
      if (get?.[1]) counter.fetching(get[1]);
      return;
    }
    const dl = /^dlstatus:\d+:([\d.]+):.* (\d+) of (\d+)/.exec(line);
    if (dl) {
      const total = Number(dl[3]);
      counter.downloaded(Number(dl[1]) >= 100 ? total : Math.max(0, Number(dl[2]) - 1), total);
      return;
    }
    const pm = /^pmstatus:([^:]+):[\d.]+:(.*)$/.exec(line);
    if (!pm) return;
    const [, pkg = "", message = ""] = pm;
    const working = pkg === "dpkg-exec" ? undefined : pkg;
    counter.installed(message.startsWith("Installed ") ? pkg : undefined, working);
  };
}

/** `apt-config dump` lines of a list option: `DPkg::Options:: "--root=/x";` -> `--root=/x`. */
export function aptListOption(dump: string, name: string): string[] {
  const re = new RegExp(`^${name}:: "(.*)";$`, "i");
  return dump
    .split("\n")
    .map((l) => re.exec(l)?.[1])
    .filter((v): v is string => v !== undefined);
}
