import { join, normalize } from "node:path";
import { fs, type Stats } from "./node-builtins.js";
import {
  asRoot,
  at,
  code,
  openStep,
  ownersFolderProblem,
  type SharedFolderOptions,
  walk,
} from "./shared-folder-walk.js";
import { UnsafePathError } from "./unsafe-path.js";

export type { SharedFolderOptions } from "./shared-folder-walk.js";
export { UnsafePathError } from "./unsafe-path.js";

const {
  closeSync,
  constants,
  fchownSync,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  readSync,
  unlinkSync,
  writeSync,
} = fs;

/*
 * The one way the agent, running as root, touches a folder another user can write: Caddy's storage and its
 * access log folder belong to Caddy's user, and a root that followed a link or opened a FIFO planted there
 * would read, write, delete or give away any file of the host, or hang. Node has no `openat`: the folder is
 * held open and named as `/proc/self/fd/<fd>/<name>`, which the kernel resolves through the descriptor, so
 * no rename or link of a folder on the way redirects what is done in it once it is open.
 */

/** A file to read: never through a link, never blocking, and checked with `fstat` once open. */
const READ = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
/** A new file only: whatever is at the name (a link put there meanwhile) makes the open fail. */
const CREATE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
/** Linux's O_PATH (the same on x86-64 and arm64), which Node does not export: a descriptor of the file itself. */
const O_PATH = 0o10000000;

/** What `open` makes of a path, undefined instead of the error when a folder on it (or it) is missing. */
function missingAsUndefined(open: () => SharedFolder): SharedFolder | undefined {
  try {
    return open();
  } catch (err) {
    if (code(err) === "ENOENT") return undefined;
    throw err;
  }
}

/** The first `bytes` of the open file `fd` (fewer when it ends before). */
export function readStart(fd: number, bytes: number): Buffer {
  const buf = Buffer.alloc(bytes);
  let got = 0;
  while (got < buf.length) {
    const n = readSync(fd, buf, got, buf.length - got, got);
    if (n === 0) break;
    got += n;
  }
  return buf.subarray(0, got);
}

/** A name of one entry of a folder: no `/`, not `.` or `..`. */
function entryName(name: string): string {
  if (name === "" || name === "." || name === ".." || name.includes("/") || name.includes("\0"))
    throw new Error(`not a name in a folder: ${JSON.stringify(name)}`);
  return name;
}

/**
 * A folder held open. Every entry is reached relative to it, never through a link: files are read only when
 * `fstat` shows a regular file of the folder's owner, created only where nothing is, and removed by name
 * (a link itself, never what it points to).
 */
export class SharedFolder {
  private closed = false;

  private constructor(
    /** The path it was opened by: for messages only, never opened again. */
    readonly path: string,
    private readonly fd: number,
    /** The user its files must belong to, and the group files it makes are given. */
    readonly owner: number,
    private readonly group: number,
    /** The owner the caller named, if any. */
    private readonly named: number | undefined,
  ) {}

  /**
   * Opens the folder at the absolute `path`, walking it from `/` one folder at a time: a link is followed only
   * where root alone could have put it (a folder of root's that no one else can write, or sticky with a link
   * of root's); from the first folder root does not own on, none is, and every folder must be the owner's
   * (or root's) and writable by no one else. Throws UnsafePathError, or an error with code ENOENT.
   */
  static open(path: string, o: SharedFolderOptions = {}): SharedFolder {
    const w = walk(path, o);
    return new SharedFolder(normalize(path), w.fd, w.owner, w.group, o.owner);
  }

  /**
   * The user a folder at `path` would take as its owner (see `open`), read as far as the path exists; root
   * when all of that is root's. Throws UnsafePathError when what exists fails a check.
   */
  static ownerOf(path: string): number {
    const w = walk(path, { stopAtMissing: true });
    closeSync(w.fd);
    return w.owner;
  }

  /** The folder at `path` held open (see `open`); undefined when it, or a folder on the way, is missing. */
  static openIfThere(path: string, o: SharedFolderOptions = {}): SharedFolder | undefined {
    return missingAsUndefined(() => SharedFolder.open(path, o));
  }

  /** Runs `fn` with the folder open, and closes it. */
  static with<T>(path: string, o: SharedFolderOptions, fn: (folder: SharedFolder) => T): T {
    const folder = SharedFolder.open(path, o);
    try {
      return fn(folder);
    } finally {
      folder.close();
    }
  }

  /** Runs `fn` with the folder open, and closes it; undefined, without running it, when the folder is missing. */
  static withIfThere<T>(
    path: string,
    o: SharedFolderOptions,
    fn: (folder: SharedFolder) => T,
  ): T | undefined {
    const folder = SharedFolder.openIfThere(path, o);
    if (folder === undefined) return undefined;
    try {
      return fn(folder);
    } finally {
      folder.close();
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.fd);
  }

  /** The names in the folder. */
  names(): string[] {
    return readdirSync(this.entry("."));
  }

  /** What is at `name`, not following a link; undefined when nothing is. */
  stat(name: string): Stats | undefined {
    return lstatSync(this.entry(name), { throwIfNoEntry: false });
  }

  /** The folder `name` in this one, held open (see `open`); made when missing and `create` says so. */
  folder(name: string, o: { create?: boolean } = {}): SharedFolder {
    const label = join(this.path, entryName(name));
    const step = openStep(this.fd, name, label, { uid: this.owner, gid: this.group }, o.create === true);
    const why = ownersFolderProblem(step.stat, this.owner);
    if (why) {
      closeSync(step.fd);
      throw new UnsafePathError(label, why);
    }
    return new SharedFolder(label, step.fd, this.owner, this.group, this.named);
  }

  /** The folder `name` in this one, held open (see `folder`); undefined when there is none. */
  folderIfThere(name: string): SharedFolder | undefined {
    return missingAsUndefined(() => this.folder(name));
  }

  /**
   * Opens the regular file `name` to read: its descriptor and what `fstat` said of it; undefined when there
   * is none. A link, a FIFO, a device or a file of another user (root's only with one name) is refused
   * (UnsafePathError).
   */
  openFile(name: string): { fd: number; stat: Stats } | undefined {
    let fd: number;
    try {
      fd = openSync(this.entry(name), READ);
    } catch (err) {
      if (code(err) === "ENOENT") return undefined;
      if (code(err) === "ELOOP") throw this.unsafe(name, "is a link");
      throw err;
    }
    try {
      const stat = fstatSync(fd);
      if (!stat.isFile()) throw this.unsafe(name, "is not a regular file");
      this.checkOwner(name, stat);
      return { fd, stat };
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /** The content of the regular file `name` (see `openFile`), at most `maxBytes` of its start; undefined when there is none. */
  readFile(name: string, maxBytes = 16 * 1024 * 1024): Buffer | undefined {
    const file = this.openFile(name);
    if (file === undefined) return undefined;
    try {
      return readStart(file.fd, Math.min(file.stat.size, maxBytes));
    } finally {
      closeSync(file.fd);
    }
  }

  /**
   * Writes `data` as the new file `name` (whatever non-folder was at the name is removed first, a link
   * itself and never its target), mode `mode`, given to the folder's owner.
   */
  writeFile(name: string, data: string | Buffer, mode: number): void {
    this.remove(name);
    const fd = openSync(this.entry(name), CREATE, mode);
    try {
      const buf = typeof data === "string" ? Buffer.from(data) : data;
      for (let done = 0; done < buf.length; ) done += writeSync(fd, buf, done, buf.length - done);
      if (asRoot() && this.owner !== 0) fchownSync(fd, this.owner, this.group);
    } finally {
      closeSync(fd);
    }
  }

  /** Removes the entry `name` if it is not a folder: a link itself, never what it points to. Whether one was there. */
  remove(name: string): boolean {
    try {
      unlinkSync(this.entry(name));
      return true;
    } catch (err) {
      if (code(err) === "ENOENT") return false;
      if (code(err) === "EISDIR" || code(err) === "EPERM") throw this.unsafe(name, "is a folder");
      throw err;
    }
  }

  /**
   * Opens the unix socket `name` for a connection (as `/proc/self/fd/<n>`, which the kernel resolves through
   * the descriptor of that very socket file: a link is refused, never followed). `close` once connected.
   */
  socket(name: string): { path: string; close: () => void } {
    const fd = openSync(this.entry(name), O_PATH | constants.O_NOFOLLOW);
    try {
      const stat = fstatSync(fd);
      if (stat.isSymbolicLink()) throw this.unsafe(name, "is a link");
      if (!stat.isSocket()) throw this.unsafe(name, "is not a socket");
      this.checkOwner(name, stat);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
    let open = true;
    const close = () => {
      if (open) closeSync(fd);
      open = false;
    };
    return { path: `/proc/self/fd/${fd}`, close };
  }

  /**
   * A file must be the owner's; root's with one name (written by the agent, or by a Caddy that runs as root),
   * never a second name of a root's file elsewhere (a hard link); in a sticky folder anyone writes (/tmp),
   * each entry is its owner's, so any user's but another than the owner named.
   */
  private checkOwner(name: string, stat: Stats): void {
    if (stat.uid === this.owner || (stat.uid === 0 && stat.nlink === 1)) return;
    const folder = fstatSync(this.fd);
    const sticky = folder.uid === 0 && (folder.mode & 0o1002) === 0o1002;
    if (sticky && stat.uid !== 0 && (this.named === undefined || stat.uid === this.named)) return;
    const hardLink = stat.uid === 0 ? " (a hard link)" : "";
    throw this.unsafe(name, `belongs to uid ${stat.uid}, not ${this.named ?? this.owner}${hardLink}`);
  }

  private entry(name: string): string {
    if (this.closed) throw new Error(`${this.path} is closed`);
    return at(this.fd, name === "." ? "." : entryName(name));
  }

  private unsafe(name: string, reason: string): UnsafePathError {
    return new UnsafePathError(join(this.path, name), reason);
  }
}
