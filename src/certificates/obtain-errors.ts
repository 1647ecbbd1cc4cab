import { basename, dirname, isAbsolute } from "node:path";
import { fs, type Stats } from "../util/node-builtins.js";
import { SharedFolder, UnsafePathError } from "../util/shared-folder.js";

const { closeSync, readSync } = fs;

/** Caddy's last failure to get a certificate for a name, as its log says it. */
export interface ObtainError {
  message: string;
  /** When Caddy logged it (its `ts`), ISO 8601; null when the line had no readable time. */
  at: string | null;
}

/** What the log is read for: the message certmagic logs per failed attempt, and the one that ends them. */
const FAILED = "could not get certificate from issuer";
const OBTAINED = "certificate obtained successfully";
const RENEWED = "certificate renewed successfully";
const LOGGERS = new Set(["tls.obtain", "tls.renew"]);
const CHUNK = 256 * 1024;

interface LogLine {
  logger?: unknown;
  msg?: unknown;
  identifier?: unknown;
  error?: unknown;
  ts?: unknown;
}

const timeOf = (ts: unknown): string | null => {
  if (typeof ts === "string" && !Number.isNaN(Date.parse(ts))) return new Date(ts).toISOString();
  if (typeof ts === "number") return new Date(ts * 1000).toISOString();
  return null;
};

/**
 * The failures Caddy logged to obtain or renew certificates (loggers `tls.obtain` and `tls.renew`, message
 * "could not get certificate from issuer", JSON lines), by identifier; a later success clears a name's.
 * The log is never read whole: the first read takes its last `maxBytes`, each later one what was appended
 * since (at most `maxBytes` of it), and a log Caddy rolled (another file at the path) is read from its start
 * while what was found before is kept. At most `maxNames` names are remembered, the oldest dropped first.
 */
export class ObtainErrorLog {
  private readonly errors = new Map<string, ObtainError>();
  private file: { path: string; ino: number; offset: number } | undefined;

  constructor(
    private readonly maxBytes = 8 * 1024 * 1024,
    private readonly maxNames = 50_000,
  ) {}

  /**
   * The last failure per name, after reading what the log at `path` gained; none when there is no log. The
   * log is Caddy's user's (`caddyUser` when the agent knows it): opened through SharedFolder, so a link or a
   * FIFO in its place, or a file of another user, is refused (UnsafePathError) and never read.
   */
  read(path: string | undefined, caddyUser?: number): ReadonlyMap<string, ObtainError> {
    if (path === undefined || !isAbsolute(path)) return this.errors;
    let file: { fd: number; stat: Stats } | undefined;
    try {
      const options = caddyUser === undefined ? {} : { owner: caddyUser };
      file = SharedFolder.withIfThere(dirname(path), options, (folder) => folder.openFile(basename(path)));
    } catch (err) {
      // A log the agent may not read (EACCES, as another user) gives no errors; one that fails a check says so.
      if (err instanceof UnsafePathError) throw err;
      return this.errors;
    }
    if (file === undefined) return this.errors;
    const fd = file.fd;
    try {
      const { ino, size } = file.stat;
      const last = this.file?.path === path ? this.file : undefined;
      // Where the lines not yet read begin: after the last read, at the start of a file Caddy rolled in
      // since, or, the first time, `maxBytes` before the end.
      let start = last === undefined ? 0 : last.ino === ino && last.offset <= size ? last.offset : 0;
      let aligned = true;
      if (size - start > this.maxBytes || last === undefined) {
        start = Math.max(size - this.maxBytes, start);
        aligned = start === 0 || start === last?.offset;
      }
      this.file = { path, ino, offset: this.scan(fd, start, size, aligned) };
    } finally {
      closeSync(fd);
    }
    return this.errors;
  }

  /**
   * Reads `[start, end)` chunk by chunk and returns where the next read begins: a line cut at `start` (when
   * not `aligned` on a line's start) is skipped, and one not finished at `end` is read again next time.
   */
  private scan(fd: number, start: number, end: number, aligned: boolean): number {
    const buf = Buffer.alloc(Math.min(CHUNK, Math.max(end - start, 1)));
    let pos = start;
    let rest = "";
    let skip = !aligned;
    while (pos < end) {
      const n = readSync(fd, buf, 0, Math.min(buf.length, end - pos), pos);
      if (n <= 0) break;
      pos += n;
      const lines = (rest + buf.toString("utf8", 0, n)).split("\n");
      rest = lines.pop() ?? "";
      if (skip && lines.length > 0) {
        lines.shift();
        skip = false;
      }
      for (const line of lines) this.take(line);
    }
    return pos - Buffer.byteLength(rest);
  }

  /** Takes lines read elsewhere (Caddy's journal), oldest first. */
  readLines(lines: readonly string[]): void {
    for (const line of lines) this.take(line);
  }

  /** The last failure per name found so far. */
  current(): ReadonlyMap<string, ObtainError> {
    return this.errors;
  }

  private take(line: string): void {
    if (!line.includes(FAILED) && !line.includes(OBTAINED) && !line.includes(RENEWED)) return;
    let parsed: LogLine;
    try {
      parsed = JSON.parse(line) as LogLine;
    } catch {
      return;
    }
    if (!LOGGERS.has(String(parsed.logger)) || typeof parsed.identifier !== "string") return;
    const name = parsed.identifier.toLowerCase();
    this.errors.delete(name);
    if (parsed.msg !== FAILED) return;
    this.errors.set(name, {
      message: typeof parsed.error === "string" ? parsed.error : String(parsed.msg),
      at: timeOf(parsed.ts),
    });
    if (this.errors.size > this.maxNames) {
      const oldest = this.errors.keys().next().value;
      if (oldest !== undefined) this.errors.delete(oldest);
    }
  }
}
