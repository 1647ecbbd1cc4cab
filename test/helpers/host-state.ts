import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/**
 * The host's own package state, which no test may touch: dpkg's status and log, dnf's and rpm's state
 * and logs, and the reboot flag. A test takes this before and after and compares.
 */
const HOST_PATHS = [
  "/var/lib/dpkg/status",
  "/var/log/dpkg.log",
  "/var/log/apt/history.log",
  "/run/reboot-required",
  "/var/lib/rpm",
  "/var/lib/dnf",
  "/var/cache/dnf",
  "/var/log/dnf.log",
  "/var/log/dnf.rpm.log",
  "/var/log/dnf.librepo.log",
  "/var/log/hawkey.log",
  join(homedir(), ".rpmdb"),
];

function fingerprint(path: string, out: Record<string, string>, depth = 0): void {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(path);
  } catch {
    out[path] = "absent";
    return;
  }
  if (st.isDirectory()) {
    out[path] = `dir ${st.mtimeMs}`;
    if (depth < 4) for (const e of readdirSync(path).sort()) fingerprint(join(path, e), out, depth + 1);
    return;
  }
  const hash = createHash("sha256").update(readFileSync(path)).digest("hex");
  out[path] = `${st.size} ${st.mtimeMs} ${hash}`;
}

export function hostPackageState(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of HOST_PATHS) fingerprint(p, out);
  return out;
}
