/**
 * The environment of every child the agent starts (Caddy, apt/dnf, the reboot command, operator instances)
 * is built from an allowlist, never by passing the agent's own on: the agent's environment may hold
 * `HOSTKEEPER_*` secrets, object-storage credentials (`AWS_*`) and whatever else its unit or shell carried,
 * and a child (or every package maintainer script apt runs) has no business with them. An entry ending in
 * `*` passes every variable with that prefix.
 */
export const CHILD_ENV = {
  /** Operator instances: what the README promises them, besides their own settings. */
  operator: ["PATH", "HOME", "LANG", "TZ"],
  /** The reboot command (`systemctl reboot`, `shutdown -r`). */
  reboot: ["PATH", "LANG", "LC_ALL", "TZ"],
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
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
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

/** The variables of `from` that `allow` names (see CHILD_ENV), plus `set`, which wins. */
export function childEnv(
  from: NodeJS.ProcessEnv,
  allow: readonly string[],
  set: Record<string, string> = {},
): Record<string, string> {
  const exact = new Set(allow.filter((a) => !a.endsWith("*")));
  const prefixes = allow.filter((a) => a.endsWith("*")).map((a) => a.slice(0, -1));
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(from)) {
    if (v === undefined) continue;
    if (exact.has(k) || prefixes.some((p) => k.startsWith(p))) env[k] = v;
  }
  return Object.assign(env, set);
}
