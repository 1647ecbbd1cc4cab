import { basename, dirname } from "node:path";
import { Readable } from "node:stream";
import { promisify } from "node:util";
import { createGunzip } from "node:zlib";
import { fs } from "../util/node-builtins.js";
import { SharedFolder } from "../util/shared-folder.js";
import { TAIL_MAX_BYTES, type Tail, tailLines } from "./files.js";

/*
 * A route's newest lines across the files Caddy rolled from its log (`<base>-<time>.log.gz`, or without
 * `.gz` when it does not compress), for a tail that asks for more than the current file holds.
 */

const read = promisify(fs.read);
const close = promisify(fs.close);

const CHUNK = 64 * 1024;

/** Caddy's rolled files of `<base>.log` among `names`, newest first (their times sort as text). */
export function rolledNames(names: readonly string[], base: string): string[] {
  const prefix = `${base}-`;
  // Caddy 2.11 names why it rolled after the time (`-size`, `-time`).
  const stamp = /^\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}\.\d{3}(?:-[a-z]+)?\.log(?:\.gz)?$/;
  return names
    .filter((n) => n.startsWith(prefix) && stamp.test(n.slice(prefix.length)))
    .sort()
    .reverse();
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
