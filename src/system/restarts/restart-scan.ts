import { join } from "node:path";
import { promisify } from "node:util";
import { fs } from "../../util/node-builtins.js";

/* The agent's own scan for processes running replaced code: /proc/<pid>/maps, grouped by systemd unit. */

const readFile = promisify(fs.readFile);
const readdir = promisify(fs.readdir);
const readlink = promisify(fs.readlink);
const stat = promisify(fs.stat);

/** Processes of one systemd service (or of none: `unit` null) that map files replaced or deleted since. */
export interface ServiceToRestart {
  unit: string | null;
  pids: number[];
  files: string[];
}

/** A file-backed mapping of `/proc/<pid>/maps`: the file as mapped (device, inode) and its path now. */
export interface MappedFile {
  path: string;
  /** `major:minor` of the filesystem the mapped file is on, as maps prints it (hex). */
  device: string;
  inode: number;
  /** The kernel marked the path ` (deleted)`: the mapped file has no name anymore. */
  deleted: boolean;
}

const MAPS_LINE = /^[0-9a-f]+-[0-9a-f]+ \S{4} [0-9a-f]+ ([0-9a-f]+:[0-9a-f]+) (\d+)\s+(.*)$/;
const DELETED = " (deleted)";

/**
 * What a scan leaves out by name: `memfd:` files, System V shared memory (`/SYSV` and its key) and device
 * files (`/dev/...`, graphics buffers, a shared `/dev/zero`), which are memory, not code on disk. POSIX shared
 * memory under `/dev/shm` is a file on a mounted tmpfs like any other, so it counts.
 */
function leftOutByName(path: string): boolean {
  if (path.startsWith("/memfd:")) return true;
  if (/^\/SYSV[0-9a-f]{8}$/.test(path)) return true;
  return path.startsWith("/dev/") && !path.startsWith("/dev/shm/");
}

/**
 * The file-backed mappings of a maps file, once per file: anonymous and pseudo mappings (`[heap]`, `[vdso]`,
 * inode 0, no path) and those `leftOutByName` are left out. The kernel writes a newline in a path as `\012`.
 */
export function parseMaps(text: string): MappedFile[] {
  const seen = new Map<string, MappedFile>();
  for (const line of text.split("\n")) {
    const m = MAPS_LINE.exec(line);
    if (!m) continue;
    const [, device = "", inodeText = "0", raw = ""] = m;
    const inode = Number(inodeText);
    if (inode === 0 || !raw.startsWith("/")) continue;
    const deleted = raw.endsWith(DELETED);
    const path = (deleted ? raw.slice(0, -DELETED.length) : raw).replaceAll("\\012", "\n");
    if (leftOutByName(path)) continue;
    seen.set(`${device}\u0000${inode}\u0000${raw}`, { path, device, inode, deleted });
  }
  return [...seen.values()];
}

/**
 * The systemd unit of a process from `/proc/<pid>/cgroup`: the innermost `.service` of its systemd cgroup
 * path (the `name=systemd` hierarchy of cgroup v1 or hybrid, else the unified `0::` one). A user's service
 * (under `user@UID.service`) is named by its own unit. Null for a process in no service: a login session's
 * or a container's `.scope`, a kernel thread, a host without systemd.
 */
export function unitOfCgroup(text: string): string | null {
  const lines = text.split("\n");
  const path =
    lines.find((l) => /^\d+:name=systemd:/.test(l))?.replace(/^\d+:name=systemd:/, "") ??
    lines.find((l) => l.startsWith("0::"))?.slice(3);
  if (path === undefined) return null;
  const units = path.split("/").filter((part) => /^[^/]+\.service$/.test(part));
  return units[units.length - 1] ?? null;
}

/** The devices (`major:minor`, decimal) of the filesystems a mountinfo lists. */
export function mountedDevices(mountinfo: string): Set<string> {
  const out = new Set<string>();
  for (const line of mountinfo.split("\n")) {
    const dev = /^\d+ \d+ (\d+:\d+) /.exec(line)?.[1];
    if (dev !== undefined) out.add(dev);
  }
  return out;
}

/** A device as maps prints it (`fe:01`, hex) the way mountinfo does (`254:1`). */
const decimalDevice = (device: string) =>
  device
    .split(":")
    .map((n) => Number.parseInt(n, 16))
    .join(":");

/** A read that found nothing: the process ended meanwhile, or the agent may not read it (not root). */
async function readOrUndefined(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch {
    return undefined;
  }
}

/** What a scan learns once and reuses: per mount namespace, the devices mounted there (undefined when its
 * mountinfo cannot be read); per namespace, root and path, what `lookup` found there. */
interface ScanCache {
  procRoot: string;
  /** The view of the scanning process, when it can be read. */
  reader?: View;
  mounts: Map<string, Promise<Set<string> | undefined>>;
  inodes: Map<string, Promise<Found>>;
}

/** An inode; null: nothing at the path; undefined: unknown (no permission); `gone`: the process ended. */
type Found = number | null | undefined | "gone";

async function lookup(c: ScanCache, pid: string, path: string): Promise<Found> {
  try {
    return (await stat(join(c.procRoot, pid, "root", path))).ino;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") return undefined;
    // Through the root of a process that has ended, every path is missing.
    const alive = await stat(join(c.procRoot, pid, "root")).then(
      () => true,
      () => false,
    );
    return alive ? null : "gone";
  }
}

/**
 * The inode at `path` in the process's own root, looked up once per view (namespace and root); null when
 * nothing is there, undefined when unknown. A lookup made through a process that ended meanwhile says
 * nothing of the path: it is made again through the asking one.
 */
async function inodeAt(
  c: ScanCache,
  pid: string,
  view: string,
  path: string,
): Promise<number | null | undefined> {
  const key = `${view}\u0000${path}`;
  for (;;) {
    const cached = c.inodes.get(key);
    const found = cached ?? lookup(c, pid, path);
    if (cached === undefined) c.inodes.set(key, found);
    const r = await found;
    if (r !== "gone") return r;
    if (c.inodes.get(key) === found) c.inodes.delete(key);
    // This process's own lookup: it has ended, and `replacedFiles` leaves it out.
    if (cached === undefined) return undefined;
  }
}

/** Where a process's paths are looked up: through its root (`pid`), as one view (namespace and root). */
interface View {
  pid: string;
  key: string;
}

async function viewOf(c: ScanCache, pid: string): Promise<View & { ns: string }> {
  const link = (name: string) => readlink(join(c.procRoot, pid, name)).catch(() => `pid ${pid}`);
  const ns = await link("ns/mnt");
  return { pid, ns, key: `${ns}\u0000${await link("root")}` };
}

/** The scanning process (`self`), whose root maps names files from; undefined when unreadable (a test's tree). */
async function readerOf(procRoot: string): Promise<View | undefined> {
  try {
    const link = (name: string) => readlink(join(procRoot, "self", name));
    return { pid: "self", key: `${await link("ns/mnt")}\u0000${await link("root")}` };
  } catch {
    return undefined;
  }
}

/** The devices mounted in mount namespace `ns`, read from `pid`'s mountinfo; undefined when unreadable. */
async function mountedIn(c: ScanCache, pid: string, ns: string): Promise<Set<string> | undefined> {
  let reading = c.mounts.get(ns);
  if (reading === undefined) {
    reading = readOrUndefined(join(c.procRoot, pid, "mountinfo")).then((t) =>
      t === undefined ? t : mountedDevices(t),
    );
    c.mounts.set(ns, reading);
  }
  const mounted = await reading;
  // Unreadable (this process ended, say): the next process of the namespace reads its own.
  if (mounted === undefined && c.mounts.get(ns) === reading) c.mounts.delete(ns);
  return mounted;
}

/**
 * The files of one process that were replaced or deleted since it mapped them: the kernel marked the mapping
 * deleted, or its path leads to the mapped inode neither in the process's own root (`/proc/<pid>/root`:
 * a container sees its own files) nor in the agent's (maps names a file from the reader's root: a process
 * that chrooted after mapping its libraries, like sshd's privilege separation or rpm's scriptlets, still
 * runs the host's). Devices are not compared: btrfs subvolumes and overlayfs give `stat` another device
 * than maps shows for the same file, while an inode number cannot be taken by a new file while the old one,
 * still mapped, holds it. Mappings on a filesystem mounted nowhere in the process's namespace are the
 * kernel's own memory (anonymous huge pages, AIO rings, shared memory objects) and are left out.
 */
async function replacedFiles(c: ScanCache, pid: string): Promise<string[]> {
  const maps = await readOrUndefined(join(c.procRoot, pid, "maps"));
  if (maps === undefined) return [];
  const mapped = parseMaps(maps);
  if (mapped.length === 0) return [];
  const own = await viewOf(c, pid);
  const mounted = await mountedIn(c, pid, own.ns);
  const views = c.reader === undefined || c.reader.key === own.key ? [own] : [own, c.reader];
  const out = new Set<string>();
  for (const f of mapped) {
    if (mounted !== undefined && !mounted.has(decimalDevice(f.device))) continue;
    if (f.deleted) {
      out.add(f.path);
      continue;
    }
    const found = await Promise.all(views.map((v) => inodeAt(c, v.pid, v.key, f.path)));
    // Nothing there (null) or another inode is replaced; unknown everywhere (no permission) is not.
    if (!found.includes(f.inode) && found.some((n) => n !== undefined)) out.add(f.path);
  }
  if (out.size === 0) return [];
  // A process that ended meanwhile finds nothing at its paths: it has nothing to restart.
  return (await stat(join(c.procRoot, pid, "root")).then(
    () => true,
    () => false,
  ))
    ? [...out]
    : [];
}

/** How many processes are read at once. */
const CONCURRENCY = 16;

/**
 * Scans the process table under `procRoot` (`/proc`; a test gives a tree of its own) and groups the
 * processes that map replaced or deleted files by systemd unit, services by name then the processes of no
 * service. Reads only; a process that ends or cannot be read meanwhile is skipped.
 */
export async function scanProcesses(procRoot = "/proc"): Promise<ServiceToRestart[]> {
  const pids = (await readdir(procRoot)).filter((e) => /^\d+$/.test(e));
  const cache: ScanCache = { procRoot, mounts: new Map(), inodes: new Map() };
  cache.reader = await readerOf(procRoot);
  const byUnit = new Map<string | null, { pids: Set<number>; files: Set<string> }>();
  for (let i = 0; i < pids.length; i += CONCURRENCY) {
    await Promise.all(
      pids.slice(i, i + CONCURRENCY).map(async (pid) => {
        const files = await replacedFiles(cache, pid);
        if (files.length === 0) return;
        const cgroup = await readOrUndefined(join(procRoot, pid, "cgroup"));
        const unit = cgroup === undefined ? null : unitOfCgroup(cgroup);
        const group = byUnit.get(unit) ?? { pids: new Set(), files: new Set() };
        group.pids.add(Number(pid));
        for (const f of files) group.files.add(f);
        byUnit.set(unit, group);
      }),
    );
  }
  return [...byUnit.entries()]
    .map(([unit, g]) => ({
      unit,
      pids: [...g.pids].sort((a, b) => a - b),
      files: [...g.files].sort(),
    }))
    .sort((a, b) => (a.unit === null ? 1 : b.unit === null ? -1 : a.unit.localeCompare(b.unit)));
}
