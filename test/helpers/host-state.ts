import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { basename, join } from "node:path";

/**
 * The host's own package state, which no test may touch: dpkg's status and log, apt's history, rpm's
 * database (Debian's rpm keeps it in ~/.rpmdb), dnf's transaction history and rpm log, and the reboot flag.
 * And the host's trust stores (the system's CA folder and bundle, Java's cacerts, the user's NSS database):
 * a Caddy run as root installs its local CA into all of them unless its config says `install_trust: false`.
 * A test takes this before and after and compares.
 *
 * Left out, because they change while the package state does not (an unrelated rpm or dnf run on the
 * machine changes them, so comparing them made the check flaky):
 * - dnf's own logs (dnf.log, dnf.librepo.log, hawkey.log) and its metadata cache (/var/cache/dnf): every dnf
 *   run writes them, a `dnf check-update` included, and so does a distribution's makecache timer.
 * - in dnf.rpm.log, the `--- logging initialized ---` line every dnf run appends; the log's transaction
 *   lines (`Installed: ...`, `Upgrade: ...`) are compared.
 */
const HOST_PATHS = [
  "/var/lib/dpkg/status",
  "/var/log/dpkg.log",
  "/var/log/apt/history.log",
  "/run/reboot-required",
  "/var/lib/rpm",
  join(homedir(), ".rpmdb"),
  "/var/lib/dnf",
  "/var/log/dnf.rpm.log",
  "/usr/local/share/ca-certificates",
  "/etc/ssl/certs/ca-certificates.crt",
  "/etc/ssl/certs/java/cacerts",
  "/etc/pki/ca-trust/source/anchors",
  join(homedir(), ".pki/nssdb"),
];

/**
 * Files inside those directories that a reader rewrites, left out for the same reason:
 * - `*-shm`: SQLite's WAL index (rpmdb.sqlite-shm, dnf's history.sqlite-shm). Every reader, an `rpm -q`
 *   included, writes its read marks into it; it holds no data, only an index of the `-wal` file, from which
 *   SQLite rebuilds it. A change of packages is written to the `-wal` and, when rpm closes the database,
 *   into `rpmdb.sqlite` itself: both are compared.
 * - `__db.NNN`: the Berkeley DB environment (shared memory regions) of an rpmdb of rpm < 4.16, which every
 *   reader writes its locks into. The data is in `Packages`, which is compared.
 */
const rewrittenByReaders = (name: string) => name.endsWith("-shm") || /^__db\.\d+$/.test(name);

const DNF_RUN_MARKER = /^.* INFO --- logging initialized ---\n/gm;

/** Directories by the names they hold, files by their content: times change on reads, contents do not. */
function fingerprint(path: string, out: Record<string, string>, depth = 0): void {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(path);
  } catch {
    out[path] = "absent";
    return;
  }
  if (st.isDirectory()) {
    const entries = readdirSync(path)
      .filter((e) => !rewrittenByReaders(e))
      .sort();
    out[path] = `dir: ${entries.join(", ")}`;
    if (depth < 4) for (const e of entries) fingerprint(join(path, e), out, depth + 1);
    return;
  }
  if (rewrittenByReaders(basename(path))) return;
  let content = readFileSync(path);
  if (basename(path) === "dnf.rpm.log")
    content = Buffer.from(content.toString("utf8").replace(DNF_RUN_MARKER, ""));
  out[path] = `sha256 ${createHash("sha256").update(content).digest("hex")}`;
}

/** The fingerprint of the host's package state, or of `paths` (for a test of this check itself). */
export function hostPackageState(paths: readonly string[] = HOST_PATHS): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of paths) fingerprint(p, out);
  return out;
}
