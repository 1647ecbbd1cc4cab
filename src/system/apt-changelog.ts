import { spawn } from "node:child_process";
import { gunzipSync } from "node:zlib";
import { signalGroup } from "../util/processes.js";
import type { Advisory, Severity } from "./package-manager.js";

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
 * Reads one member of the package's data archive, streaming `dpkg-deb --fsys-tarfile` through a small tar
 * reader and stopping dpkg-deb as soon as the member was read, so a large package is not unpacked. Resolves
 * the source package name (from the changelog) and its entries, or undefined when the package has no changelog
 * of its own (e.g. its doc folder links to another package's).
 */
export function readDebChangelog(
  deb: string,
  pkg: string,
  timeoutMs: number,
): Promise<{ source: string; entries: ChangelogEntry[] } | undefined> {
  const wanted = new Set(["changelog.Debian.gz", "changelog.gz"].map((f) => `usr/share/doc/${pkg}/${f}`));
  return new Promise((resolve, reject) => {
    const child = spawn("dpkg-deb", ["--fsys-tarfile", deb], {
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
      env: { ...process.env, LC_ALL: "C" },
    });
    let buffered: Buffer = Buffer.alloc(0);
    let skip = 0;
    let collecting: { name: string; size: number; parts: Buffer[]; got: number } | undefined;
    let longName: string | undefined;
    const found = new Map<string, Buffer>();
    let done = false;
    let stderr = "";
    const finish = (err: Error | undefined) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (child.exitCode === null && child.pid !== undefined) signalGroup(child.pid, "SIGKILL");
      if (err) return reject(err);
      const gz =
        found.get(`usr/share/doc/${pkg}/changelog.Debian.gz`) ??
        found.get(`usr/share/doc/${pkg}/changelog.gz`);
      if (gz === undefined) return resolve(undefined);
      try {
        const text = gunzipSync(gz, { maxOutputLength: MAX_CHANGELOG }).toString("utf8");
        const entries = parseChangelog(text);
        resolve({ source: /^(\S+) \(/.exec(text)?.[1] ?? pkg, entries });
      } catch (e) {
        reject(new Error(`the changelog of ${deb} cannot be read: ${(e as Error).message}`));
      }
    };
    const timer = setTimeout(
      () => finish(new Error(`reading the changelog of ${deb} took more than ${timeoutMs / 1000} s`)),
      timeoutMs,
    );
    child.stderr.on("data", (c: Buffer) => {
      if (stderr.length < 4096) stderr += c.toString("utf8");
    });
    child.once("error", (e) => finish(e));
    child.once("close", (code) => {
      if (done) return;
      if (code !== 0 && found.size === 0)
        finish(new Error(`dpkg-deb --fsys-tarfile ${deb} failed (exit ${code}): ${stderr.trim()}`));
      else finish(undefined);
    });
    child.stdout.on("data", (chunk: Buffer) => {
      buffered = buffered.length ? Buffer.concat([buffered, chunk]) : chunk;
      for (;;) {
        if (skip > 0) {
          const n = Math.min(skip, buffered.length);
          if (collecting) {
            collecting.parts.push(
              buffered.subarray(0, Math.max(0, Math.min(n, collecting.size - collecting.got))),
            );
            collecting.got += n;
          }
          buffered = buffered.subarray(n);
          skip -= n;
          if (skip > 0) return;
          if (collecting) {
            const data = Buffer.concat(collecting.parts).subarray(0, collecting.size);
            if (collecting.name === "\0longname") longName = data.toString("utf8").replace(/\0.*$/s, "");
            else if (collecting.name === "\0pax")
              longName = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(data.toString("utf8"))?.[1];
            else found.set(collecting.name, data);
            collecting = undefined;
            // An upstream changelog.gz may sit beside the Debian one: only the Debian one ends the search.
            if (found.has(`usr/share/doc/${pkg}/changelog.Debian.gz`)) return finish(undefined);
          }
        }
        if (buffered.length < 512) return;
        const header = buffered.subarray(0, 512);
        buffered = buffered.subarray(512);
        if (header.every((b) => b === 0)) continue;
        const field = (off: number, len: number) =>
          header
            .subarray(off, off + len)
            .toString("utf8")
            .replace(/\0.*$/s, "");
        const size = Number.parseInt(field(124, 12).trim() || "0", 8);
        const type = field(156, 1);
        const prefix = field(345, 155);
        let name = longName ?? (prefix ? `${prefix}/${field(0, 100)}` : field(0, 100));
        longName = undefined;
        name = name.replace(/^\.\//, "").replace(/^\//, "");
        skip = Math.ceil(size / 512) * 512;
        // GNU long names (`L`, what dpkg-deb writes) and pax headers (`x`, other .deb builders) name the next member.
        if (type === "L") collecting = { name: "\0longname", size, parts: [], got: 0 };
        else if (type === "x") collecting = { name: "\0pax", size, parts: [], got: 0 };
        else if ((type === "0" || type === "") && wanted.has(name) && size <= MAX_CHANGELOG)
          collecting = { name, size, parts: [], got: 0 };
        if (skip === 0 && collecting) {
          found.set(collecting.name, Buffer.alloc(0));
          collecting = undefined;
        }
      }
    });
  });
}
