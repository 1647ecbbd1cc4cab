import { basename, isAbsolute, join, normalize } from "node:path";
import type { Stats } from "./node-builtins.js";
import { fs } from "./node-builtins.js";

const {
  closeSync,
  constants,
  fchownSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readlinkSync,
} = fs;
const { readSync, unlinkSync, writeSync } = fs;

/*
 * The one way the agent, running as root, touches a folder another user can write: Caddy's storage and its
 * access log folder belong to Caddy's user, and a root that followed a link or opened a FIFO planted there
 * would read, write, delete or give away any file of the host, or hang. Node has no `openat`: the folder is
 * held open and named as `/proc/self/fd/<fd>/<name>`, which the kernel resolves through the descriptor, so
 * no rename or link of a folder on the way redirects what is done in it once it is open.
 */

/** A folder: never through a link, never blocking (a FIFO in its place fails the type check, not the open). */
const DIR = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
/** A file to read: the same, and checked with `fstat` once open. */
const READ = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
/** A new file only: whatever is at the name (a link put there meanwhile) makes the open fail. */
const CREATE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
/** Links a walk follows in root's own folders before it gives up (as the kernel's own limit). */
const MAX_LINKS = 40;

/** A folder or file that failed a check: a link, not a folder or a regular file, another user's, writable by others. */
export class UnsafePathError extends Error {
  constructor(
    readonly path: string,
    readonly reason: string,
  ) {
    super(`${path} ${reason}: the agent does not use it`);
    this.name = "UnsafePathError";
  }

  /** The message with the folders left out (for a problem: the agent's log names the whole path). */
  withoutFolders(): string {
    return `${basename(this.path) || this.path} ${this.reason}: the agent does not use it (its log names the path)`;
  }
}

export interface SharedFolderOptions {
  /**
   * The user every folder from the first one that root does not own, and every file, must belong to (Caddy's
   * user). Default: the owner of that first folder; root when the whole path is root's.
   */
  owner?: number;
  /** Make missing folders, mode 0700, given to the owner. */
  create?: boolean;
}

const at = (fd: number, name: string) => `/proc/self/fd/${fd}/${name}`;
const code = (err: unknown) => (err as NodeJS.ErrnoException).code;
const asRoot = () => process.geteuid?.() === 0;

/** Why a folder's mode lets users other than its owner (and root) change what is in it; undefined when it does not. */
function othersWrite(st: Stats, stickyAllowed: boolean): string | undefined {
  if (stickyAllowed && st.mode & 0o1000) return undefined;
  if (st.mode & 0o002) return "is writable by every user";
  if (st.mode & 0o020 && st.gid !== 0) return `is writable by group ${st.gid}`;
  return undefined;
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
  ) {}

  /**
   * Opens the folder at the absolute `path`, walking it from `/` one folder at a time: a link is followed only
   * where root alone could have put it (a folder of root's that no one else can write, or sticky with a link
   * of root's); from the first folder root does not own on, none is, and every folder must be the owner's
   * (or root's) and writable by no one else. Throws UnsafePathError, or an error with code ENOENT.
   */
  static open(path: string, o: SharedFolderOptions = {}): SharedFolder {
    const w = walk(path, o);
    return new SharedFolder(normalize(path), w.fd, w.owner, w.group);
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

  /** Runs `fn` with the folder open, and closes it. */
  static with<T>(path: string, o: SharedFolderOptions, fn: (folder: SharedFolder) => T): T {
    const folder = SharedFolder.open(path, o);
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
    try {
      if (step.stat.uid !== this.owner && step.stat.uid !== 0)
        throw new UnsafePathError(label, `belongs to uid ${step.stat.uid}, not to uid ${this.owner}`);
      const why = othersWrite(step.stat, false);
      if (why) throw new UnsafePathError(label, why);
    } catch (err) {
      closeSync(step.fd);
      throw err;
    }
    return new SharedFolder(label, step.fd, this.owner, this.group);
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
      // Root's own file with one name (written by the agent, or by a Caddy that runs as root) is accepted;
      // a second name of a root's file elsewhere (a hard link) is not.
      const roots = stat.uid === 0 && stat.nlink === 1;
      if (stat.uid !== this.owner && !roots)
        throw this.unsafe(
          name,
          `belongs to uid ${stat.uid}, not ${this.owner}${stat.uid === 0 ? " (a hard link)" : ""}`,
        );
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
      const buf = Buffer.alloc(Math.min(file.stat.size, maxBytes));
      let got = 0;
      while (got < buf.length) {
        const n = readSync(file.fd, buf, got, buf.length - got, got);
        if (n === 0) break;
        got += n;
      }
      return buf.subarray(0, got);
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

  private entry(name: string): string {
    if (this.closed) throw new Error(`${this.path} is closed`);
    return at(this.fd, name === "." ? "." : entryName(name));
  }

  private unsafe(name: string, reason: string): UnsafePathError {
    return new UnsafePathError(join(this.path, name), reason);
  }
}

interface WalkState {
  fd: number;
  /** Where the walk is, for messages and relative links. */
  at: string;
  /** The owner of the first folder that is not root's, once the walk has passed one, and its group. */
  zoneOwner: number | undefined;
  zoneGroup: number;
  stat: Stats;
}

/** The folder at `path` held open, and the user its files must belong to; see `SharedFolder.open`. */
function walk(
  path: string,
  o: SharedFolderOptions & { stopAtMissing?: boolean },
): { fd: number; owner: number; group: number } {
  if (!isAbsolute(path)) throw new Error(`not an absolute path: ${path}`);
  let pending = normalize(path)
    .split("/")
    .filter((p) => p !== "");
  const root = openSync("/", DIR);
  const s: WalkState = { fd: root, at: "/", zoneOwner: undefined, zoneGroup: 0, stat: fstatSync(root) };
  let links = 0;
  try {
    while (pending.length > 0) {
      const name = pending.shift() as string;
      if (name === ".") continue;
      const link = linkTarget(s, name);
      if (link !== undefined) {
        if (++links > MAX_LINKS) throw new UnsafePathError(path, "has too many links on the way");
        pending = [...link.split("/").filter((p) => p !== ""), ...pending];
        if (link.startsWith("/")) restart(s);
        continue;
      }
      if (name === ".." && s.zoneOwner !== undefined)
        throw new UnsafePathError(path, "leads out of a folder another user owns");
      // With an owner named, folders are made only inside that owner's part: a storage moved into root's
      // folders gets none of the owner's there.
      const mayCreate =
        o.create === true &&
        name !== ".." &&
        (o.owner === undefined || o.owner === 0 || s.zoneOwner !== undefined);
      let step: { fd: number; stat: Stats };
      try {
        step = openStep(s.fd, name, join(s.at, name), createdOwner(s, o.owner), mayCreate);
      } catch (err) {
        if (o.stopAtMissing && code(err) === "ENOENT") break;
        if (o.create && !mayCreate && code(err) === "ENOENT")
          throw new UnsafePathError(s.at, `belongs to uid 0, not to uid ${o.owner}`);
        throw err;
      }
      closeSync(s.fd);
      s.fd = step.fd;
      s.at = join(s.at, name);
      passFolder(s, step.stat, o.owner);
    }
    const owner = s.zoneOwner ?? 0;
    if (o.owner !== undefined && owner !== o.owner && !o.stopAtMissing)
      throw new UnsafePathError(path, `belongs to uid ${owner}, not to uid ${o.owner}`);
    return { fd: s.fd, owner, group: s.zoneGroup };
  } catch (err) {
    closeSync(s.fd);
    throw err;
  }
}

/** The target of the link `name` when the walk may follow it (only root could have put it there); undefined when `name` is no link. */
function linkTarget(s: WalkState, name: string): string | undefined {
  if (name === "..") return undefined;
  const st = lstatSync(at(s.fd, name), { throwIfNoEntry: false });
  if (st === undefined || !st.isSymbolicLink()) return undefined;
  const rootOnly = s.zoneOwner === undefined && s.stat.uid === 0 && othersWrite(s.stat, false) === undefined;
  const rootsInSticky = s.zoneOwner === undefined && s.stat.uid === 0 && st.uid === 0 && s.stat.mode & 0o1000;
  if (!rootOnly && !rootsInSticky)
    throw new UnsafePathError(join(s.at, name), "is a link another user could have put there");
  return readlinkSync(at(s.fd, name));
}

function isLink(dirFd: number, name: string): boolean {
  return lstatSync(at(dirFd, name), { throwIfNoEntry: false })?.isSymbolicLink() === true;
}

/** Whom a folder the walk makes is given to: the owner asked for, else the owner of the part it is in. */
function createdOwner(s: WalkState, owner: number | undefined): { uid: number; gid: number } | undefined {
  if (owner !== undefined) return { uid: owner, gid: s.zoneOwner === owner ? s.zoneGroup : owner };
  return s.zoneOwner === undefined ? undefined : { uid: s.zoneOwner, gid: s.zoneGroup };
}

function restart(s: WalkState): void {
  closeSync(s.fd);
  s.fd = openSync("/", DIR);
  s.at = "/";
  s.stat = fstatSync(s.fd);
}

/** Checks the folder the walk has just entered, and notes where the owner's part of the path begins. */
function passFolder(s: WalkState, st: Stats, owner: number | undefined): void {
  s.stat = st;
  const inZone = s.zoneOwner !== undefined;
  if (!inZone && st.uid === 0) {
    const why = othersWrite(st, true);
    if (why) throw new UnsafePathError(s.at, why);
    return;
  }
  if (!inZone) {
    if (owner !== undefined && st.uid !== owner)
      throw new UnsafePathError(s.at, `belongs to uid ${st.uid}, not to uid ${owner}`);
    s.zoneOwner = st.uid;
    s.zoneGroup = st.gid;
  } else if (st.uid !== s.zoneOwner && st.uid !== 0)
    throw new UnsafePathError(s.at, `belongs to uid ${st.uid}, not to uid ${s.zoneOwner}`);
  const why = othersWrite(st, false);
  if (why) throw new UnsafePathError(s.at, why);
}

/**
 * Opens the folder `name` in the folder `dirFd` (never through a link: a link there is ELOOP, reported as
 * such); made, mode 0700 and given to `owner`, when missing and `create`. `label` names it in errors.
 */
function openStep(
  dirFd: number,
  name: string,
  label: string,
  owner: { uid: number; gid: number } | undefined,
  create: boolean,
): { fd: number; stat: Stats } {
  let madeHere = false;
  for (let tries = 0; ; tries++) {
    try {
      const fd = openSync(at(dirFd, name), DIR);
      const stat = fstatSync(fd);
      if (!madeHere || !asRoot() || owner === undefined || owner.uid === stat.uid) return { fd, stat };
      fchownSync(fd, owner.uid, owner.gid);
      return { fd, stat: fstatSync(fd) };
    } catch (err) {
      // O_DIRECTORY with O_NOFOLLOW answers ENOTDIR for a link (ELOOP on some kernels): told apart here.
      if (code(err) === "ELOOP" || code(err) === "ENOTDIR")
        throw new UnsafePathError(label, isLink(dirFd, name) ? "is a link" : "is not a folder");
      if (code(err) !== "ENOENT" || !create || tries > 0) throw err;
    }
    try {
      mkdirSync(at(dirFd, name), 0o700);
      madeHere = true;
    } catch (err) {
      // Made meanwhile by someone else: opened and checked like any folder found there, never given away.
      if (code(err) !== "EEXIST") throw err;
    }
  }
}
