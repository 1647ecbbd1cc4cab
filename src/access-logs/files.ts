import { basename, dirname } from "node:path";
import { Readable } from "node:stream";
import { promisify } from "node:util";
import { createGunzip } from "node:zlib";
import { fs } from "../util/node-builtins.js";
import { SharedFolder } from "../util/shared-folder.js";

/*
 * The access log files, as the agent reads and removes them (Caddy writes and rolls them): the newest lines
 * of a route's file (and of the files Caddy rolled from it), and the files of routes that no longer log,
 * once they are old enough.
 */

const read = promisify(fs.read);
const close = promisify(fs.close);

/** How much of a file is read at a time (from its end backwards, or a rolled one from its start). */
const CHUNK = 64 * 1024;

/** The most of a file one read of its newest lines takes (and so about the most one answer carries). */
export const TAIL_MAX_BYTES = 2 * 1024 * 1024;

/** The newest lines of a log, and whether older lines that were asked for were left out for `maxBytes`. */
export interface Tail {
  lines: string[];
  cut: boolean;
}

/**
 * The last `n` complete lines of the file at `path`, oldest first, within its last `maxBytes`; no lines when
 * there is no file. The file is read backwards a chunk at a time until it has `n` lines or `maxBytes`: what
 * is held is those bytes, whatever the file's size. A last line without its newline (Caddy writing it right
 * now) is not one yet; a line that does not fit whole in `maxBytes` is left out, and the tail says it was cut.
 * The folder is Caddy's user's: the file is opened through SharedFolder (a link, a FIFO or another user's
 * file is refused with UnsafePathError, never opened).
 */
export async function tailLines(path: string, n: number, maxBytes = TAIL_MAX_BYTES): Promise<Tail> {
  const file = SharedFolder.withIfThere(dirname(path), {}, (folder) => folder.openFile(basename(path)));
  if (file === undefined) return { lines: [], cut: false };
  const { fd } = file;
  try {
    const end = file.stat.size;
    const floor = Math.max(0, end - maxBytes);
    let pos = end;
    const chunks: Buffer[] = [];
    let newlines = 0;
    // n + 1 newlines: the one before the first wanted line ends the read (the end of the file needs none).
    while (pos > floor && newlines <= n) {
      const len = Math.min(CHUNK, pos - floor);
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
    const whole = lines.filter((l) => l.length > 0);
    // Cut: the byte limit stopped the read before it had the lines asked for (and the file had more).
    const cut = pos > 0 && newlines <= n;
    return { lines: whole.slice(-n), cut };
  } finally {
    await close(fd);
  }
}

/** The last `n` complete lines of the file at `path` within the last TAIL_MAX_BYTES (see `tailLines`). */
export async function lastLines(path: string, n: number): Promise<string[]> {
  return (await tailLines(path, n)).lines;
}

/**
 * `<base>.log`, or a file Caddy rolled from it: `<base>-<time>.log`, or `<base>-<time>-<why>.log` (Caddy 2.11
 * names why it rolled, `size` or `time`), gzipped or not.
 */
const LOG_FILE = /^(.+?)(?:-(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}\.\d{3})(?:-[a-z]+)?)?\.log(\.gz|\.zst)?$/;

/** The route id a file in the access log folder belongs to (see `accessLogFile`); undefined for another file. */
export function routeIdOfFile(name: string): string | undefined {
  const m = LOG_FILE.exec(name);
  return m?.[1]?.replace(/%2A/g, "*");
}

/**
 * Caddy's rolled files of `<base>.log` among `names` that the tail reads (plain or gzipped), newest first
 * (their times sort as text).
 */
function rolledNames(names: readonly string[], base: string): string[] {
  const rolled: { name: string; time: string }[] = [];
  for (const name of names) {
    const m = LOG_FILE.exec(name);
    if (m?.[1] === base && m[2] !== undefined && m[3] !== ".zst") rolled.push({ name, time: m[2] });
  }
  return rolled.sort((a, b) => (a.time < b.time ? 1 : a.time > b.time ? -1 : 0)).map((r) => r.name);
}

/**
 * The last `n` complete lines of the log at `path` and, when it holds fewer, of the files rolled from it,
 * newest first, oldest line first in the answer; within `maxBytes` of lines in all, `cut` when lines asked
 * for were left out for it. Each file is opened through SharedFolder, as the current one is.
 */
export async function tailAcrossRolls(path: string, n: number, maxBytes = TAIL_MAX_BYTES): Promise<Tail> {
  const current = await tailLines(path, n, maxBytes);
  if (current.cut || current.lines.length >= n) return current;
  const dir = dirname(path);
  const base = basename(path).replace(/\.log$/, "");
  const names = SharedFolder.withIfThere(dir, {}, (folder) => folder.names()) ?? [];
  let lines = current.lines;
  let budget = maxBytes - bytesOf(lines);
  for (const name of rolledNames(names, base)) {
    const file = SharedFolder.withIfThere(dir, {}, (folder) => folder.openFile(name));
    // Removed by Caddy since the folder was listed (it keeps only so many): the older ones are gone too.
    if (file === undefined) break;
    let older: Tail;
    try {
      older = await fileTail(file.fd, name.endsWith(".gz"), n - lines.length, budget);
    } finally {
      await close(file.fd);
    }
    lines = [...older.lines, ...lines];
    budget -= bytesOf(older.lines);
    if (older.cut) return { lines, cut: true };
    if (lines.length >= n) break;
  }
  return { lines, cut: false };
}

const bytesOf = (lines: readonly string[]) => lines.reduce((a, l) => a + Buffer.byteLength(l) + 1, 0);

/** The file's bytes, a chunk at a time from its start. */
async function* chunksOf(fd: number): AsyncGenerator<Buffer> {
  for (let pos = 0; ; ) {
    const buf = Buffer.alloc(CHUNK);
    const { bytesRead } = await read(fd, buf, 0, CHUNK, pos);
    if (bytesRead === 0) return;
    pos += bytesRead;
    yield buf.subarray(0, bytesRead);
  }
}

/**
 * The last `n` complete lines of a rolled file, read (and gunzipped) from its start, holding at most `n`
 * lines and `maxBytes` of them at any time; `cut` when lines that were asked for were dropped for the bytes.
 */
async function fileTail(fd: number, gz: boolean, n: number, maxBytes: number): Promise<Tail> {
  const raw = Readable.from(chunksOf(fd));
  const text = (gz ? raw.pipe(createGunzip()) : raw).setEncoding("utf8");
  const kept: string[] = [];
  let held = 0;
  let seen = 0;
  let rest = "";
  for await (const chunk of text as AsyncIterable<string>) {
    const parts = (rest + chunk).split("\n");
    rest = parts.pop() ?? "";
    for (const line of parts) {
      if (line.length === 0) continue;
      seen++;
      kept.push(line);
      held += Buffer.byteLength(line) + 1;
      while (kept.length > n || held > maxBytes) held -= Buffer.byteLength(kept.shift() as string) + 1;
    }
  }
  // Cut: fewer lines kept than asked for, though the file had more.
  return { lines: kept, cut: kept.length < n && seen > kept.length };
}

/** What a look at the access log folder found: the stale files, and entries that are not regular files of its owner. */
export interface StaleLook {
  stale: string[];
  /** Names of routes' logs that are links, folders, FIFOs or another user's: never touched, warned of. */
  refused: string[];
}

/**
 * The files in `dir` of routes not in `logging` (deleted, or no longer logging) that were last written more
 * than `keepDays` days ago, rolled ones included; never a file of a route in `logging`, nor a file that is
 * no route's, nor anything but a regular file of the folder's owner (Caddy's user). The folder is read
 * through SharedFolder: a link in its place or on the way to it is refused (UnsafePathError).
 */
export function staleFiles(
  dir: string,
  logging: ReadonlySet<string>,
  keepDays: number,
  now = Date.now(),
): StaleLook {
  const before = now - keepDays * 86_400_000;
  return (
    SharedFolder.withIfThere(dir, {}, (folder) => staleIn(folder, logging, before)) ?? {
      stale: [],
      refused: [],
    }
  );
}

function staleIn(folder: SharedFolder, logging: ReadonlySet<string>, before: number): StaleLook {
  const look: StaleLook = { stale: [], refused: [] };
  for (const name of folder.names()) {
    const id = routeIdOfFile(name);
    if (id === undefined || logging.has(id)) continue;
    const s = folder.stat(name);
    if (s === undefined) continue;
    if (!s.isFile() || s.uid !== folder.owner) look.refused.push(name);
    else if (s.mtimeMs <= before) look.stale.push(name);
  }
  return look;
}

/** Removes the stale files (see `staleFiles`), each checked again just before; returns the names removed. */
export function removeStaleFiles(dir: string, logging: ReadonlySet<string>, keepDays: number): string[] {
  const before = Date.now() - keepDays * 86_400_000;
  // Unlinking removes the name in this folder and nothing else, whatever it has become meanwhile.
  const removed = SharedFolder.withIfThere(dir, {}, (folder) => {
    const names: string[] = [];
    for (const name of staleIn(folder, logging, before).stale) if (folder.remove(name)) names.push(name);
    return names;
  });
  return removed ?? [];
}
