import type { Setting } from "./config.js";
import type { AppConfig } from "./settings.js";
import { fs } from "./util/node-builtins.js";

const { readFileSync } = fs;

/** Environment variables of the HOSTKEEPER_ prefix that are not settings but still the agent's. */
const OTHER_KNOWN = ["HOSTKEEPER_CONFIG"];

/** Levenshtein distance: insertions, deletions and substitutions, each costing 1. */
export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const sub = (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      row.push(Math.min((prev[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, sub));
    }
    prev = row;
  }
  return prev[b.length] ?? 0;
}

/**
 * One warning per `HOSTKEEPER_*` variable of the environment that no setting reads, naming the known
 * name closest to it: a typo would otherwise leave the default in force without a word.
 */
export function unknownEnvWarnings(env: NodeJS.ProcessEnv, settings: Iterable<Setting<unknown>>): string[] {
  const known = [...[...settings].map((s) => s.env), ...OTHER_KNOWN];
  const warnings: string[] = [];
  for (const name of Object.keys(env).sort()) {
    if (!name.startsWith("HOSTKEEPER_") || known.includes(name)) continue;
    let closest = known[0] ?? "";
    let best = Number.POSITIVE_INFINITY;
    for (const k of known) {
      const d = editDistance(name, k);
      if (d < best) {
        best = d;
        closest = k;
      }
    }
    warnings.push(`unknown environment variable ${name} is ignored; did you mean ${closest}?`);
  }
  return warnings;
}

/** What decides whether this process may do what a root process may. */
export interface Privileges {
  uid: number;
  /** CAP_NET_BIND_SERVICE in the effective set. */
  canBindLowPorts: boolean;
  /** net.ipv4.ip_unprivileged_port_start: the lowest port any user may bind (1024 unless changed). */
  unprivilegedPortStart: number;
}

/** This process's privileges, from /proc (Linux); without /proc, as a user without capabilities. */
export function currentPrivileges(): Privileges {
  const uid = process.getuid?.() ?? -1;
  let canBindLowPorts = false;
  try {
    const capEff = /^CapEff:\s*([0-9a-f]+)$/m.exec(readFileSync("/proc/self/status", "utf8"))?.[1];
    // CAP_NET_BIND_SERVICE is capability 10.
    canBindLowPorts = capEff !== undefined && (BigInt(`0x${capEff}`) & (1n << 10n)) !== 0n;
  } catch {
    // no /proc
  }
  let unprivilegedPortStart = 1024;
  try {
    unprivilegedPortStart = Number(
      readFileSync("/proc/sys/net/ipv4/ip_unprivileged_port_start", "utf8").trim(),
    );
  } catch {
    // no /proc: the classic limit
  }
  return { uid, canBindLowPorts, unprivilegedPortStart };
}

const portOf = (address: string): number | undefined => {
  const m = /:(\d+)$/.exec(address);
  return m ? Number(m[1]) : undefined;
};

/**
 * The features that will fail because the agent does not run as root, one entry each; empty as root.
 * Said at start, so that the first use is not where one learns it.
 */
export function rootlessFailures(config: AppConfig, p: Privileges): string[] {
  if (p.uid === 0) return [];
  const failures: string[] = [];
  const privileged = (port: number | undefined) =>
    port !== undefined && port > 0 && port < p.unprivilegedPortStart && !p.canBindLowPorts;
  const { listen } = config.agent;
  if (listen !== "off" && privileged(listen.port))
    failures.push(`the API on port ${listen.port} (HOSTKEEPER_LISTEN)`);
  if (!config.proxy.caddyAdmin) {
    const low = config.proxy.caddyListen.filter((a) => privileged(portOf(a)));
    if (low.length > 0)
      failures.push(`the embedded Caddy listening on ${low.join(", ")} (HOSTKEEPER_CADDY_LISTEN)`);
  }
  const slots = Object.entries(config.operator.ports).filter(([, port]) => privileged(port));
  if (slots.length > 0)
    failures.push(
      `operator slots on ${slots.map(([slot, port]) => `${slot} ${port}`).join(", ")} (HOSTKEEPER_OPERATOR_PORTS)`,
    );
  const { packageManager, aptConfig, dnfInstallroot, rebootCommand } = config.system;
  const sandboxed =
    packageManager === "apt"
      ? aptConfig !== undefined
      : packageManager === "dnf"
        ? dnfInstallroot !== undefined
        : aptConfig !== undefined || dnfInstallroot !== undefined;
  if (!sandboxed)
    failures.push(
      "check-updates and apply-updates (apt-get and dnf change the host's package state, which needs root)",
    );
  failures.push(`auto_reboot (the reboot command ${rebootCommand.join(" ")} needs root)`);
  return failures;
}
