import { isAbsolute, join, normalize } from "node:path";
import { fs, type Stats } from "./node-builtins.js";
import { UnsafePathError } from "./unsafe-path.js";

const { closeSync, constants, fchownSync, fstatSync, lstatSync, mkdirSync, openSync, readlinkSync } = fs;

/*
 * The walk of SharedFolder.open (src/util/shared-folder.ts): a path opened from `/` one folder at a time,
 * each named relative to the descriptor of the one before as `/proc/self/fd/<fd>/<name>`.
 */

/** A folder: never through a link, never blocking (a FIFO in its place fails the type check, not the open). */
const DIR = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
/** Links a walk follows in root's own folders before it gives up (as the kernel's own limit). */
const MAX_LINKS = 40;

export interface SharedFolderOptions {
  /**
   * The user every folder from the first one that root does not own, and every file, must belong to (Caddy's
   * user). Default: the owner of that first folder; root when the whole path is root's.
   */
  owner?: number;
  /** Make missing folders, mode 0700, given to the owner. */
  create?: boolean;
}

export const at = (fd: number, name: string) => `/proc/self/fd/${fd}/${name}`;
export const code = (err: unknown) => (err as NodeJS.ErrnoException).code;
export const asRoot = () => process.geteuid?.() === 0;

/**
 * What is wrong with a folder inside `owner`'s part of a path: another user's than the owner's or root's, or
 * writable by others; undefined when nothing is.
 */
export function ownersFolderProblem(st: Stats, owner: number): string | undefined {
  if (st.uid !== owner && st.uid !== 0) return `belongs to uid ${st.uid}, not to uid ${owner}`;
  return othersWrite(st, false);
}

/** Why a folder's mode lets users other than its owner (and root) change what is in it; undefined when it does not. */
function othersWrite(st: Stats, stickyAllowed: boolean): string | undefined {
  if (stickyAllowed && st.mode & 0o1000) return undefined;
  if (st.mode & 0o002) return "is writable by every user";
  if (st.mode & 0o020 && st.gid !== 0) return `is writable by group ${st.gid}`;
  return undefined;
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
export function walk(
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
  }
  const why = ownersFolderProblem(st, s.zoneOwner ?? st.uid);
  if (why) throw new UnsafePathError(s.at, why);
}

/**
 * Opens the folder `name` in the folder `dirFd` (never through a link: a link there is ELOOP, reported as
 * such); made, mode 0700 and given to `owner`, when missing and `create`. `label` names it in errors.
 */
export function openStep(
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
