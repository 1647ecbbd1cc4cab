import { dirname, join } from "node:path";
import { fs } from "../util/node-builtins.js";
import type { LoadFile } from "./caddy-tls.js";
import type { CustomCertificate } from "./custom-store.js";

const {
  closeSync,
  constants,
  existsSync,
  fchownSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeSync,
} = fs;

/**
 * A new file only, never through a link: the folder belongs to Caddy's user, and an agent running as root
 * that followed a link planted there would write, or give away, any file of the host.
 */
const CREATE_NEW = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

/** The tag of every `load_files` entry the agent wrote: how it tells its own from anyone else's. */
export const LOAD_FILES_TAG = "hostkeeper";

/** The folder of the copies, beside Caddy's own `certificates` folder in its storage. */
const COPIES_FOLDER = "hostkeeper-custom";

/**
 * Caddy's copies of the custom certificates: `<storage root>/hostkeeper-custom/<name>.<hash>.crt` and
 * `.key`, mode 0600 in a 0700 folder, owned by the owner of Caddy's storage (Caddy's user: the agent's own
 * with the embedded Caddy, hostkeeper-caddy for the packaged one, for which the agent runs as root), so
 * only Caddy and root can read a key. Caddy reads them through `load_files`, never inlined into its config.
 * The content's hash in the name makes a replaced certificate a new path, so the replace is a config
 * change Caddy applies (the same paths would be "config unchanged") and the old files go after it.
 */
export class CaddyCopies {
  readonly dir: string;

  constructor(private readonly storageRoot: string) {
    this.dir = join(storageRoot, COPIES_FOLDER);
  }

  paths(cert: CustomCertificate): { certificate: string; key: string } {
    const base = join(this.dir, `${cert.name}.${cert.hash}`);
    return { certificate: `${base}.crt`, key: `${base}.key` };
  }

  loadFile(cert: CustomCertificate): LoadFile {
    return { ...this.paths(cert), format: "pem", tags: [LOAD_FILES_TAG, `${LOAD_FILES_TAG}:${cert.name}`] };
  }

  /** Writes the copies of `cert` unless they are there with that content already. */
  write(cert: CustomCertificate): void {
    const owner = this.owner();
    this.makeFolder(owner);
    const { certificate, key } = this.paths(cert);
    for (const [path, text] of [
      [certificate, cert.certificatePem],
      [key, cert.keyPem],
    ] as const) {
      if (this.holds(path, text)) continue;
      // Unlinking removes whatever is at the path (a link itself, never its target); the open then fails
      // rather than follow anything put there in between.
      rmSync(path, { force: true });
      const fd = openSync(path, CREATE_NEW, 0o600);
      try {
        writeSync(fd, text);
        if (process.getuid?.() === 0) fchownSync(fd, owner.uid, owner.gid);
      } finally {
        closeSync(fd);
      }
    }
  }

  /** Removes every copy but those of `kept` (a replaced or deleted certificate's, any left by a crash). */
  removeAllBut(kept: readonly CustomCertificate[]): void {
    const keep = new Set(kept.flatMap((c) => Object.values(this.paths(c))));
    let files: string[];
    try {
      files = readdirSync(this.dir);
    } catch {
      return;
    }
    for (const f of files) {
      const path = join(this.dir, f);
      if (!keep.has(path)) rmSync(path, { force: true });
    }
  }

  /** The folder, and any folder above it Caddy had not made yet, each made Caddy's. */
  private makeFolder(owner: { uid: number; gid: number }): void {
    const missing: string[] = [];
    for (let dir = this.dir; !existsSync(dir) && dirname(dir) !== dir; dir = dirname(dir))
      missing.unshift(dir);
    for (const dir of missing) {
      mkdirSync(dir, { mode: 0o700 });
      this.own(dir, owner);
    }
  }

  private holds(path: string, text: string): boolean {
    try {
      const st = lstatSync(path);
      if (!st.isFile() || (st.mode & 0o777) !== 0o600) return false;
      return readFileSync(path, "utf8") === text;
    } catch {
      return false;
    }
  }

  /** The user and group Caddy runs as: the owner of its storage, or of the nearest folder above it. */
  private owner(): { uid: number; gid: number } {
    let dir = this.storageRoot;
    while (!existsSync(dir) && dirname(dir) !== dir) dir = dirname(dir);
    const { uid, gid } = statSync(dir);
    return { uid, gid };
  }

  private own(path: string, owner: { uid: number; gid: number }): void {
    // Only root can give a file away; as anyone else the owner already is the agent's user, Caddy's too.
    // lchown: a folder swapped for a link meanwhile gives the link away, never what it points to.
    if (process.getuid?.() === 0 && lstatSync(path).uid !== owner.uid) lchownSync(path, owner.uid, owner.gid);
  }
}
