import { join } from "node:path";
import { promisify } from "node:util";
import { fs } from "../util/node-builtins.js";

/*
 * The access log files, as the agent reads and removes them (Caddy writes and rolls them): the newest lines
 * of a route's file, and the files of routes that no longer log, once they are old enough.
 */

const open = promisify(fs.open);
const read = promisify(fs.read);
const fstat = promisify(fs.fstat);
const close = promisify(fs.close);
const readdir = promisify(fs.readdir);
const stat = promisify(fs.stat);
const unlink = promisify(fs.unlink);

/** How much of a file is read at a time, from its end backwards. */
const CHUNK = 64 * 1024;

/**
 * The last `n` complete lines of the file at `path`, oldest first; [] when there is no file. The file is read
 * backwards a chunk at a time until it has `n` lines: what is held is those lines and one chunk, whatever
 * the file's size. A last line without its newline (Caddy writing it right now) is not one yet.
 */
export async function lastLines(path: string, n: number): Promise<string[]> {
  let fd: number;
  try {
    fd = await open(path, "r");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
  try {
    let pos = (await fstat(fd)).size;
    const chunks: Buffer[] = [];
    let newlines = 0;
    // n + 1 newlines: the one before the first wanted line ends the read (the end of the file needs none).
    while (pos > 0 && newlines <= n) {
      const len = Math.min(CHUNK, pos);
      pos -= len;
      const buf = Buffer.alloc(len);
      const { bytesRead } = await read(fd, buf, 0, len, pos);
      const got = buf.subarray(0, bytesRead);
      for (const byte of got) if (byte === 0x0a) newlines++;
      chunks.unshift(got);
    }
    const lines = Buffer.concat(chunks).toString("utf8").split("\n");
    lines.pop();
    if (pos > 0) lines.shift();
    return lines.slice(-n).filter((l) => l.length > 0);
  } finally {
    await close(fd);
  }
}

/** `<base>.log`, or a file Caddy rolled from it: `<base>-<time>.log`, gzipped or not. */
const LOG_FILE = /^(.+?)(?:-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}\.\d{3})?\.log(?:\.gz|\.zst)?$/;

/** The route id a file in the access log folder belongs to (see `accessLogFile`); undefined for another file. */
export function routeIdOfFile(name: string): string | undefined {
  const m = LOG_FILE.exec(name);
  return m?.[1]?.replace(/%2A/g, "*");
}

/**
 * The files in `dir` of routes not in `logging` (deleted, or no longer logging) that were last written more
 * than `keepDays` days ago, rolled ones included; never a file of a route in `logging`, nor a file that is
 * no route's.
 */
export async function staleFiles(
  dir: string,
  logging: ReadonlySet<string>,
  keepDays: number,
  now = Date.now(),
): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
  const before = now - keepDays * 86_400_000;
  const stale: string[] = [];
  for (const name of names) {
    const id = routeIdOfFile(name);
    if (id === undefined || logging.has(id)) continue;
    const s = await stat(join(dir, name)).catch(() => undefined);
    if (s?.isFile() && s.mtimeMs <= before) stale.push(name);
  }
  return stale;
}

/** Removes the stale files (see `staleFiles`); returns the names removed. */
export async function removeStaleFiles(
  dir: string,
  logging: ReadonlySet<string>,
  keepDays: number,
): Promise<string[]> {
  const removed: string[] = [];
  for (const name of await staleFiles(dir, logging, keepDays)) {
    try {
      await unlink(join(dir, name));
      removed.push(name);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
  }
  return removed;
}
