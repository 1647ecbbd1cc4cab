import { join } from "node:path";
import type { LoadFile } from "../caddy/tls-config.js";
import { SharedFolder } from "../util/shared-folder.js";
import type { CustomCertificate } from "./custom-store.js";

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
 *
 * The folder is Caddy's user's: every file operation goes through `SharedFolder`, so a link or FIFO that
 * user puts at the folder, on the way to it or at a copy is refused or replaced, never followed.
 */
export class CaddyCopies {
  readonly dir: string;

  constructor(
    storageRoot: string,
    /** Caddy's user when the agent knows it (HOSTKEEPER_CADDY_DATA_DIR's owner): the storage must be theirs. */
    private readonly caddyUser?: number,
  ) {
    this.dir = join(storageRoot, COPIES_FOLDER);
  }

  paths(cert: CustomCertificate): { certificate: string; key: string } {
    const base = join(this.dir, `${cert.name}.${cert.hash}`);
    return { certificate: `${base}.crt`, key: `${base}.key` };
  }

  loadFile(cert: CustomCertificate): LoadFile {
    return { ...this.paths(cert), format: "pem", tags: [LOAD_FILES_TAG, `${LOAD_FILES_TAG}:${cert.name}`] };
  }

  /**
   * Writes the copies of `certs` that are not there with their content already; the folder, and any folder
   * above it Caddy had not made yet, made Caddy's.
   */
  write(certs: readonly CustomCertificate[]): void {
    if (certs.length === 0) return;
    const options = { create: true, ...(this.caddyUser === undefined ? {} : { owner: this.caddyUser }) };
    SharedFolder.with(this.dir, options, (folder) => {
      for (const cert of certs)
        for (const [name, text] of [
          [`${cert.name}.${cert.hash}.crt`, cert.certificatePem],
          [`${cert.name}.${cert.hash}.key`, cert.keyPem],
        ] as const)
          if (!holds(folder, name, text)) folder.writeFile(name, text, 0o600);
    });
  }

  /** Removes every copy but those of `kept` (a replaced or deleted certificate's, any left by a crash). */
  removeAllBut(kept: readonly CustomCertificate[]): void {
    const keep = new Set(kept.flatMap((c) => [`${c.name}.${c.hash}.crt`, `${c.name}.${c.hash}.key`]));
    const options = this.caddyUser === undefined ? {} : { owner: this.caddyUser };
    SharedFolder.withIfThere(this.dir, options, (folder) => {
      for (const name of folder.names())
        if (!keep.has(name) && !folder.stat(name)?.isDirectory()) folder.remove(name);
    });
  }
}

/** Whether `name` is a copy of `text` already: a regular file of Caddy's user, 0600, with that content. */
function holds(folder: SharedFolder, name: string, text: string): boolean {
  try {
    const st = folder.stat(name);
    if (!st?.isFile() || (st.mode & 0o777) !== 0o600) return false;
    return folder.readFile(name)?.toString("utf8") === text;
  } catch {
    // Another user's file, or one that changed meanwhile: written again.
    return false;
  }
}
