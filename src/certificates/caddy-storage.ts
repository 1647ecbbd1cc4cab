import { join } from "node:path";
import { fs } from "../util/node-builtins.js";
import { type CertificateFacts, leafFacts } from "./pem.js";

const { readdirSync, readFileSync, statSync } = fs;

/** Caddy's issuer key of its internal CA: certificates stored under it are `internal`, the others `acme`. */
export const INTERNAL_ISSUER_KEY = "local";

/**
 * A name as Caddy (certmagic's `StorageKeys.Safe`) turns it into a storage key: lowercase, `*` as
 * `wildcard_`, `:` as `-`, and nothing but word characters, `@`, `.` and `-`.
 */
export function storageKey(name: string): string {
  return name
    .toLowerCase()
    .trim()
    .replaceAll(" ", "_")
    .replaceAll("+", "_plus_")
    .replaceAll("*", "wildcard_")
    .replaceAll(":", "-")
    .replaceAll("..", "")
    .replace(/[^\w@.-]/g, "");
}

interface Cached {
  mtimeMs: number;
  size: number;
  facts: CertificateFacts | null;
  /** The sweep in which the file was last asked for. */
  seen: number;
}

/**
 * Certificate files parsed once: a file is read and parsed again only when its modification time or size
 * changed, so a list at 20,000 hosts costs one `stat` per certificate after the first. A file that does not
 * parse is remembered as such (null) until it changes.
 */
export class CertificateFiles {
  private readonly cache = new Map<string, Cached>();
  private sweep = 0;

  /** The facts of the leaf of `path`; undefined when there is no such file, null when it does not parse. */
  read(path: string): CertificateFacts | null | undefined {
    const stat = statSync(path, { throwIfNoEntry: false });
    if (stat === undefined || !stat.isFile()) return undefined;
    const cached = this.cache.get(path);
    if (cached && cached.mtimeMs === stat.mtimeMs && cached.size === stat.size) {
      cached.seen = this.sweep;
      return cached.facts;
    }
    let facts: CertificateFacts | null;
    try {
      facts = leafFacts(readFileSync(path));
    } catch {
      facts = null;
    }
    this.cache.set(path, { mtimeMs: stat.mtimeMs, size: stat.size, facts, seen: this.sweep });
    return facts;
  }

  /** Forgets the files no read asked for since the last call: hosts gone, certificates Caddy cleaned away. */
  forgetUnused(): void {
    for (const [path, c] of this.cache) if (c.seen !== this.sweep) this.cache.delete(path);
    this.sweep++;
  }
}

/** A certificate Caddy manages, as its storage holds it. */
export interface StoredCertificate {
  issuerKey: string;
  facts: CertificateFacts;
}

/**
 * Caddy's certificate storage (a `file_system` storage: `<root>/certificates/<issuer key>/<name>/<name>.crt`),
 * read per host rather than walked: a list reads the folder of issuer keys once and then, per host, the one
 * file each issuer may hold for it.
 */
export class CaddyStorage {
  constructor(private readonly files: CertificateFiles) {}

  /** The issuer keys that have certificates under `root`. */
  issuerKeys(root: string): string[] {
    try {
      return readdirSync(join(root, "certificates"), { withFileTypes: true })
        .filter((d) => d.isDirectory())
        .map((d) => d.name)
        .sort();
    } catch {
      // No certificate stored yet (Caddy creates the folder with the first one).
      return [];
    }
  }

  /**
   * What Caddy loads for `name` when it manages it with `issuerKeys`: of the certificates they hold for it,
   * the most recently issued (certmagic's `loadCertResourceAnyIssuer`). Undefined when none holds one.
   */
  managed(root: string, name: string, issuerKeys: readonly string[]): StoredCertificate | undefined {
    const key = storageKey(name);
    let best: StoredCertificate | undefined;
    for (const issuerKey of issuerKeys) {
      const facts = this.files.read(join(root, "certificates", issuerKey, key, `${key}.crt`));
      if (facts && (best === undefined || facts.notBefore > best.facts.notBefore))
        best = { issuerKey, facts };
    }
    return best;
  }

  /** Ends one list: files no longer asked for leave the cache. */
  listed(): void {
    this.files.forgetUnused();
  }
}
