import {
  type ChildProcess,
  type ExecFileOptions,
  execFile,
  type SpawnOptions,
  spawn,
} from "node:child_process";

/**
 * The environment of every child the agent starts (Caddy, apt/dnf, the reboot command, operator instances)
 * is built from an allowlist, never by passing the agent's own on: the agent's environment may hold
 * `HOSTKEEPER_*` secrets, object-storage credentials (`AWS_*`) and whatever else its unit or shell carried,
 * and a child (or every package maintainer script apt runs) has no business with them. An entry ending in
 * `*` passes every variable with that prefix.
 */
/** The proxy variables, both spellings: for children that reach out over HTTP. */
const PROXIES = ["http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"] as const;

export const CHILD_ENV = {
  /** Operator instances: what docs/api/operator-update.md promises them, besides their own settings. */
  operator: ["PATH", "HOME", "LANG", "TZ"],
  /** `journalctl`, reading Caddy's journal for its certificate errors. */
  journal: ["PATH", "LANG", "TZ"],
  /** The reboot command (`systemctl reboot`, `shutdown -r`). */
  reboot: ["PATH", "LANG", "LC_ALL", "TZ"],
  /**
   * The host's hooks (system/hooks): what a script needs to run and reach a load balancer or a backup
   * store; the apply's context is set by the agent (`HOSTKEEPER_HOOK_*`, `HOSTKEEPER_APPLY_*`, ...).
   */
  hooks: ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", ...PROXIES],
  /** Caddy: locale, time zone, CA bundle overrides, proxies for ACME, and Go runtime tuning. */
  caddy: [
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GOMAXPROCS",
    "GOMEMLIMIT",
    "GODEBUG",
    ...PROXIES,
  ],
  /**
   * apt and dnf, and the maintainer scripts they run: locale, a temporary folder, apt's and debconf's own
   * variables, dnf's repository variables (`DNF_VAR_*`) and proxies.
   */
  packages: [
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "TERM",
    "APT_CONFIG",
    "DEBIAN_FRONTEND",
    "DEBCONF_*",
    "DNF_VAR_*",
    "http_proxy",
    "https_proxy",
    "ftp_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "FTP_PROXY",
    "NO_PROXY",
  ],
} as const;

declare const allowListed: unique symbol;
/** An environment built by `childEnv`: the only kind `spawnChild` and `execChild` take. */
export type ChildEnv = Readonly<Record<string, string>> & { readonly [allowListed]: true };

/** The variables of `from` that `allow` names (see CHILD_ENV), plus `set`, which wins. */
export function childEnv(
  from: NodeJS.ProcessEnv,
  allow: readonly string[],
  set: Record<string, string> = {},
): ChildEnv {
  const exact = new Set(allow.filter((a) => !a.endsWith("*")));
  const prefixes = allow.filter((a) => a.endsWith("*")).map((a) => a.slice(0, -1));
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(from)) {
    if (v === undefined) continue;
    if (exact.has(k) || prefixes.some((p) => k.startsWith(p))) env[k] = v;
  }
  return Object.assign(env, set) as ChildEnv;
}

/**
 * `spawn` with an allow-listed environment. The agent starts its children only through this and
 * `execChild` (biome refuses `node:child_process` elsewhere under src/, and test/spawns.test.ts walks the
 * sources for it), so no child can be given the agent's own environment by mistake.
 */
export function spawnChild(
  file: string,
  args: readonly string[],
  options: Omit<SpawnOptions, "env"> & { env: ChildEnv },
): ChildProcess {
  return spawn(file, args, options);
}

/** `execFile` with an allow-listed environment; see `spawnChild`. */
export function execChild(
  file: string,
  args: readonly string[],
  options: Omit<ExecFileOptions, "env"> & { env: ChildEnv },
  done: (err: Error | null, stdout: string, stderr: string) => void,
): ChildProcess {
  return execFile(file, args, { ...options, encoding: "utf8" }, done);
}
