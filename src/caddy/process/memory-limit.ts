import type { Logger } from "pino";
import { fs } from "../../util/node-builtins.js";

const { readFileSync, renameSync, writeFileSync } = fs;

/**
 * Go's memory limit for Caddy from HOSTKEEPER_CADDY_MEMORY_LIMIT_MB: Go keeps the heap a config reload
 * allocated until it nears this, so without it Caddy holds the peak of its last reload for good, a peak that
 * grows with the routes. `off` for 0: no limit, and Caddy's own default (a share of the cgroup's or the
 * machine's memory) stays off too, as the setting says none.
 */
export const goMemLimit = (limitMb: number): string => (limitMb > 0 ? `${limitMb}MiB` : "off");

/** The environment variables Caddy gets from the agent's memory setting. */
export const caddyMemoryEnv = (limitMb: number): Record<string, string> => ({
  GOMEMLIMIT: goMemLimit(limitMb),
});

/**
 * Writes `GOMEMLIMIT` for a Caddy the agent does not start (HOSTKEEPER_CADDY_ENV_FILE: the packaged
 * `hostkeeper-caddy.service` reads it as an `EnvironmentFile`), only when it changes; Caddy takes it at its
 * next start, which the log says, as the agent never restarts a Caddy that serves traffic.
 */
export function writeCaddyEnvFile(path: string, limitMb: number, log: Logger): void {
  const text = [
    "# Written by hostkeeper at its start from HOSTKEEPER_CADDY_MEMORY_LIMIT_MB; edit that setting, not this",
    "# file. hostkeeper-caddy.service reads it when it starts.",
    ...Object.entries(caddyMemoryEnv(limitMb)).map(([k, v]) => `${k}=${v}`),
    "",
  ].join("\n");
  let current: string | undefined;
  try {
    current = readFileSync(path, "utf8");
  } catch {
    current = undefined;
  }
  if (current === text) return;
  // Renamed into place: a Caddy starting meanwhile reads the old file or the new one, never half of one.
  writeFileSync(`${path}.tmp`, text, { mode: 0o644 });
  renameSync(`${path}.tmp`, path);
  log.info(
    { file: path, GOMEMLIMIT: goMemLimit(limitMb) },
    "wrote Caddy's memory limit; Caddy takes it at its next start (systemctl restart hostkeeper-caddy)",
  );
}

/** The `GOMEMLIMIT` in the environment process `pid` started with; undefined when it has none or cannot be read. */
export function goMemLimitOf(pid: number): string | undefined {
  try {
    const vars = readFileSync(`/proc/${pid}/environ`, "latin1").split("\0");
    const entry = vars.find((v) => v.startsWith("GOMEMLIMIT="));
    return entry?.slice("GOMEMLIMIT=".length);
  } catch {
    return undefined;
  }
}
