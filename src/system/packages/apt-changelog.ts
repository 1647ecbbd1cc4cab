import { gunzipSync } from "node:zlib";
import { type ChildEnv, spawnChild } from "../../util/child-env.js";
import { signalGroup } from "../../util/processes.js";
import type { Advisory, Severity } from "./package-manager.js";
import { TarReader } from "./tar-reader.js";

/** dpkg's ordering of the non-digit parts of a version: `~` sorts before everything, letters before other characters. */
function order(c: string | undefined): number {
  if (c === undefined) return 0;
  if (c === "~") return -1;
  if (/[A-Za-z]/.test(c)) return c.charCodeAt(0);
  return c.charCodeAt(0) + 256;
}

function compareFragment(a: string, b: string): number {
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    let first = 0;
    while ((i < a.length && !/\d/.test(a[i] as string)) || (j < b.length && !/\d/.test(b[j] as string))) {
      const ac = i < a.length && !/\d/.test(a[i] as string) ? a[i] : undefined;
      const bc = j < b.length && !/\d/.test(b[j] as string) ? b[j] : undefined;
      const d = order(ac) - order(bc);
      if (d !== 0) return d;
      if (ac !== undefined) i++;
      if (bc !== undefined) j++;
    }
    while (a[i] === "0") i++;
    while (b[j] === "0") j++;
    while (i < a.length && j < b.length && /\d/.test(a[i] as string) && /\d/.test(b[j] as string)) {
      if (first === 0) first = (a.charCodeAt(i) as number) - (b.charCodeAt(j) as number);
      i++;
      j++;
    }
    if (i < a.length && /\d/.test(a[i] as string)) return 1;
    if (j < b.length && /\d/.test(b[j] as string)) return -1;
    if (first !== 0) return first;
  }
  return 0;
}

/** Compares two Debian versions as `dpkg --compare-versions` does: negative, zero or positive. */
export function compareDebianVersions(a: string, b: string): number {
  const split = (v: string) => {
    const colon = v.indexOf(":");
    const epoch = colon === -1 ? 0 : Number(v.slice(0, colon));
    const rest = colon === -1 ? v : v.slice(colon + 1);
    const dash = rest.lastIndexOf("-");
    return {
      epoch,
      upstream: dash === -1 ? rest : rest.slice(0, dash),
      revision: dash === -1 ? "" : rest.slice(dash + 1),
    };
  };
  const x = split(a);
  const y = split(b);
  if (x.epoch !== y.epoch) return x.epoch - y.epoch;
  return compareFragment(x.upstream, y.upstream) || compareFragment(x.revision, y.revision);
}

/** One entry of a Debian changelog. */
export interface ChangelogEntry {
  version: string;
  distribution: string;
  urgency: string;
  /** The entry's change lines. */
  text: string;
  /** The trailer's date as ISO 8601, or null. */
  date: string | null;
}

const HEADER_RE = /^(\S+) \(([^)\s]+)\) ([^;]*);(.*)$/;
const TRAILER_RE = /^ -- .*?>\s+(.+)$/;

/** Parses `debian/changelog` text (deb-changelog(5)); lines outside entries are skipped. */
export function parseChangelog(text: string): ChangelogEntry[] {
  const out: ChangelogEntry[] = [];
  let current: ChangelogEntry | undefined;
  for (const line of text.split("\n")) {
    const h = HEADER_RE.exec(line);
    if (h) {
      const urgency = /urgency=(\w+)/i.exec(h[4] ?? "")?.[1]?.toLowerCase() ?? "unknown";
      current = { version: h[2] as string, distribution: (h[3] ?? "").trim(), urgency, text: "", date: null };
      out.push(current);
      continue;
    }
    if (current === undefined) continue;
    const t = TRAILER_RE.exec(line);
    if (t) {
      const ms = Date.parse(t[1] as string);
      current.date = Number.isNaN(ms) ? null : new Date(ms).toISOString();
      current = undefined;
    } else current.text += `${line}\n`;
  }
  return out;
}

/**
 * Debian's `urgency=` says how soon an upload should reach users; for an entry that fixes a security problem
 * it is the nearest thing a changelog has to a severity: emergency and critical -> critical, high ->
 * important, medium -> moderate, low -> low. An entry that fixes no security problem gets `unknown`: its
 * urgency is about migration, not about risk.
 */
const URGENCY: Record<string, Severity> = {
  emergency: "critical",
  critical: "critical",
  high: "important",
  medium: "moderate",
  low: "low",
};

const ADVISORY_ID_RE = /\b(?:DSA|DLA|USN)-\d+(?:-\d+)?\b/g;
const CVE_RE = /\bCVE-\d{4}-\d{4,}\b/g;

/**
 * The changelog entries newer than `installed` and not newer than `candidate`, one advisory each: id the
 * first DSA/DLA/USN id the entry names, else `<source>/<version>`; type `security` when the entry names a
 * CVE or such an id or was uploaded to a `-security` suite, else `bugfix` (a stable release takes fixes only).
 */
export function changelogAdvisories(
  source: string,
  entries: readonly ChangelogEntry[],
  installed: string,
  candidate: string,
): Advisory[] {
  return entries
    .filter(
      (e) =>
        compareDebianVersions(e.version, installed) > 0 && compareDebianVersions(e.version, candidate) <= 0,
    )
    .map((e) => {
      const ids = [...new Set(e.text.match(ADVISORY_ID_RE) ?? [])];
      const cves = [...new Set(e.text.match(CVE_RE) ?? [])];
      const security = ids.length > 0 || cves.length > 0 || /-security\b/.test(e.distribution);
      return {
        id: ids[0] ?? `${source}/${e.version}`,
        type: security ? "security" : "bugfix",
        severity: security ? (URGENCY[e.urgency] ?? "unknown") : "unknown",
        cves,
        issued: e.date,
      };
    });
}

/** The most a changelog may take once decompressed; a real one is well under a megabyte. */
const MAX_CHANGELOG = 8 * 1024 * 1024;

/**
 * The changelog of package `pkg` in the .deb file `deb`: the source package's name (from the changelog) and
 * its entries, or undefined when the package has no changelog of its own (e.g. its doc folder links to
 * another package's). dpkg-deb runs with `env`.
 */
export async function readDebChangelog(
  deb: string,
  pkg: string,
  timeoutMs: number,
  env: ChildEnv,
): Promise<{ source: string; entries: ChangelogEntry[] } | undefined> {
  // An upstream changelog.gz may sit beside the Debian one, which is read first.
  const names = ["changelog.Debian.gz", "changelog.gz"].map((f) => `usr/share/doc/${pkg}/${f}`);
  const found = await readDataMembers(deb, names, timeoutMs, env);
  const gz = names.map((n) => found.get(n)).find((data) => data !== undefined);
  if (gz === undefined) return undefined;
  try {
    const text = gunzipSync(gz, { maxOutputLength: MAX_CHANGELOG }).toString("utf8");
    return { source: /^(\S+) \(/.exec(text)?.[1] ?? pkg, entries: parseChangelog(text) };
  } catch (e) {
    throw new Error(`the changelog of ${deb} cannot be read: ${(e as Error).message}`);
  }
}

/**
 * Reads the files `names` of the package's data archive, streaming `dpkg-deb --fsys-tarfile` through a tar
 * reader and stopping dpkg-deb (its process group) as soon as the first of them was read, so a large
 * package is not unpacked. Resolves what it found, by name.
 */
function readDataMembers(
  deb: string,
  names: readonly string[],
  timeoutMs: number,
  env: ChildEnv,
): Promise<Map<string, Buffer>> {
  return new Promise((resolve, reject) => {
    const child = spawnChild("dpkg-deb", ["--fsys-tarfile", deb], {
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
      env,
    });
    const reader = new TarReader((name, size) => names.includes(name) && size <= MAX_CHANGELOG);
    const found = new Map<string, Buffer>();
    let done = false;
    let stderr = "";
    const finish = (err?: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (child.exitCode === null && child.pid !== undefined) signalGroup(child.pid, "SIGKILL");
      if (err) reject(err);
      else resolve(found);
    };
    const timer = setTimeout(
      () => finish(new Error(`reading the changelog of ${deb} took more than ${timeoutMs / 1000} s`)),
      timeoutMs,
    );
    child.stderr?.on("data", (c: Buffer) => {
      if (stderr.length < 4096) stderr += c.toString("utf8");
    });
    child.once("error", (e) => finish(e));
    child.once("close", (code) => {
      if (code !== 0 && found.size === 0)
        finish(new Error(`dpkg-deb --fsys-tarfile ${deb} failed (exit ${code}): ${stderr.trim()}`));
      else finish();
    });
    child.stdout?.on("data", (chunk: Buffer) => {
      if (done) return;
      for (const m of reader.push(chunk)) found.set(m.name, m.data);
      if (found.has(names[0] ?? "")) finish();
    });
  });
}
