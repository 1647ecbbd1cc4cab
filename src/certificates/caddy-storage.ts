import { join } from "node:path";
import { fs } from "../util/node-builtins.js";
import { readStart, SharedFolder, UnsafePathError } from "../util/shared-folder.js";
import { type CertificateFacts, leafFacts } from "./pem.js";

const { closeSync } = fs;

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
  ino: number;
  mtimeMs: number;
  size: number;
  facts: CertificateFacts | null;
  /** The sweep in which the file was last asked for. */
  seen: number;
}

/**
 * Certificate files parsed once: a file is read and parsed again only when it is another file or its
 * modification time or size changed, so a list at a large host costs a few system calls per certificate
 * after the first. A file that does not parse is remembered as such (null) until it changes.
 */
export class CertificateFiles {
  private readonly cache = new Map<string, Cached>();
  private sweep = 0;

  /**
   * The facts of the leaf of the file `name` in `folder` (Caddy's, so read through SharedFolder: a link or
   * anything but a regular file of Caddy's user is refused); undefined when there is no such file, null
   * when it does not parse.
   */
  read(folder: SharedFolder, name: string): CertificateFacts | null | undefined {
    const file = folder.openFile(name);
    if (file === undefined) return undefined;
    const path = `${folder.path}/${name}`;
    try {
      const { ino, mtimeMs, size } = file.stat;
      const cached = this.cache.get(path);
      if (cached && cached.ino === ino && cached.mtimeMs === mtimeMs && cached.size === size) {
        cached.seen = this.sweep;
        return cached.facts;
      }
      let facts: CertificateFacts | null;
      try {
        facts = leafFacts(readStart(file.fd, Math.min(size, MAX_CERTIFICATE_BYTES)));
      } catch {
        facts = null;
      }
      this.cache.set(path, { ino, mtimeMs, size, facts, seen: this.sweep });
      return facts;
    } finally {
      closeSync(file.fd);
    }
  }

  /** Forgets the files no read asked for since the last call: hosts gone, certificates Caddy cleaned away. */
  forgetUnused(): void {
    for (const [path, c] of this.cache) if (c.seen !== this.sweep) this.cache.delete(path);
    this.sweep++;
  }
}

/** A certificate chain is a few KiB; a larger file is not read past this. */
const MAX_CERTIFICATE_BYTES = 1024 * 1024;

/** A certificate Caddy manages, as its storage holds it. */
export interface StoredCertificate {
  issuerKey: string;
  facts: CertificateFacts;
}

/**
 * Caddy's certificate storage (a `file_system` storage: `<root>/certificates/<issuer key>/<name>/<name>.crt`),
 * read per host rather than walked: a list reads the folder of issuer keys once and then, per host, the one
 * file each issuer may hold for it. The storage is Caddy's user's: it is read through SharedFolder, held
 * open for one list (`open` ... `close`).
 */
export class CaddyStorage {
  constructor(private readonly files: CertificateFiles) {}

  /**
   * The storage at `root` for one list; Caddy's user, when known, must own it. A storage without a
   * `certificates` folder yet (Caddy makes it with the first certificate) holds none.
   */
  open(root: string, caddyUser: number | undefined): StorageList {
    const options = caddyUser === undefined ? {} : { owner: caddyUser };
    return new StorageList(SharedFolder.openIfThere(join(root, "certificates"), options), this.files);
  }
}

/** Caddy's `certificates` folder, open for one list. */
export class StorageList {
  private readonly issuers = new Map<string, SharedFolder | undefined>();

  constructor(
    private readonly folder: SharedFolder | undefined,
    private readonly files: CertificateFiles,
  ) {}

  /** The issuer keys that have certificates. */
  issuerKeys(): string[] {
    const folder = this.folder;
    if (folder === undefined) return [];
    return folder
      .names()
      .filter((name) => {
        const st = folder.stat(name);
        if (st?.isSymbolicLink()) throw new UnsafePathError(join(folder.path, name), "is a link");
        return st?.isDirectory();
      })
      .sort();
  }

  /**
   * What Caddy loads for `name` when it manages it with `issuerKeys`: of the certificates they hold for it,
   * the most recently issued (certmagic's `loadCertResourceAnyIssuer`). Undefined when none holds one.
   */
  managed(name: string, issuerKeys: readonly string[]): StoredCertificate | undefined {
    const key = storageKey(name);
    if (key === "" || key === "." || key === "..") return undefined;
    let best: StoredCertificate | undefined;
    for (const issuerKey of issuerKeys) {
      const host = this.issuer(issuerKey)?.folderIfThere(key);
      if (host === undefined) continue;
      let facts: CertificateFacts | null | undefined;
      try {
        facts = this.files.read(host, `${key}.crt`);
      } finally {
        host.close();
      }
      if (facts && (best === undefined || facts.notBefore > best.facts.notBefore))
        best = { issuerKey, facts };
    }
    return best;
  }

  /** Ends the list: the folders are closed, and files no longer asked for leave the cache. */
  close(): void {
    for (const f of this.issuers.values()) f?.close();
    this.folder?.close();
    this.files.forgetUnused();
  }

  private issuer(issuerKey: string): SharedFolder | undefined {
    if (!this.issuers.has(issuerKey)) this.issuers.set(issuerKey, this.folder?.folderIfThere(issuerKey));
    return this.issuers.get(issuerKey);
  }
}
