import { createHash, timingSafeEqual } from "node:crypto";
import { basename, dirname, join } from "node:path";
import type { Logger } from "pino";
import { generateToken } from "../store/secrets.js";
import type { FSWatcher } from "../util/node-builtins.js";
import { fs } from "../util/node-builtins.js";
import { Periodic } from "../util/periodic.js";
import { TokenRotationError } from "./errors.js";
import { type Grant, isGrant } from "./scopes.js";

const { readFileSync, renameSync, statSync, watch, writeFileSync } = fs;

/** The name of the agent's own token (`HOSTKEEPER_TOKEN` or `<data dir>/token`); the tokens file may not use it. */
export const DEFAULT_TOKEN_NAME = "default";
export const TOKEN_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** Who a request's token says it is: the token's name and the scopes it holds. */
export interface Principal {
  name: string;
  scopes: ReadonlySet<Grant>;
}

interface Entry extends Principal {
  hash: Buffer;
  /** Epoch ms after which the entry no longer authenticates (the old secret of a rotation). */
  notAfter: number | undefined;
}

const sha256 = (s: string) => createHash("sha256").update(s).digest();

/** One entry of the tokens file as other tools write it; keys beyond these are kept as they are. */
interface FileEntry {
  name: string;
  sha256: string;
  scopes: string[];
  not_after?: string;
  [key: string]: unknown;
}

/** The tokens file's entries, checked; throws an Error saying what is wrong (the file's path is the caller's). */
export function parseTokensFile(text: string): { raw: Record<string, unknown>; entries: FileEntry[] } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new Error(`not JSON: ${(err as Error).message}`);
  }
  if (typeof raw !== "object" || raw === null || !Array.isArray((raw as { tokens?: unknown }).tokens))
    throw new Error('expected an object with a "tokens" array');
  const entries = (raw as { tokens: unknown[] }).tokens;
  const current = new Set<string>();
  entries.forEach((e, i) => {
    const at = `tokens[${i}]`;
    if (typeof e !== "object" || e === null) throw new Error(`${at} is not an object`);
    const { name, sha256: hash, scopes, not_after } = e as Record<string, unknown>;
    if (typeof name !== "string" || !TOKEN_NAME.test(name))
      throw new Error(`${at}.name must be 1-64 letters, digits, ".", "_" or "-"`);
    if (name === DEFAULT_TOKEN_NAME)
      throw new Error(`${at}.name "${DEFAULT_TOKEN_NAME}" is the agent's own token's name`);
    if (typeof hash !== "string" || !/^[0-9a-fA-F]{64}$/.test(hash))
      throw new Error(`${at}.sha256 must be 64 hexadecimal digits`);
    if (!Array.isArray(scopes) || scopes.length === 0 || !scopes.every(isGrant))
      throw new Error(`${at}.scopes must be a non-empty list of known scopes`);
    if (not_after !== undefined && (typeof not_after !== "string" || Number.isNaN(Date.parse(not_after))))
      throw new Error(`${at}.not_after must be a date-time`);
    if (not_after === undefined) {
      if (current.has(name)) throw new Error(`${at}.name "${name}" is used twice`);
      current.add(name);
    }
  });
  return { raw: raw as Record<string, unknown>, entries: entries as FileEntry[] };
}

const toEntry = (e: FileEntry): Entry => ({
  name: e.name,
  hash: Buffer.from(e.sha256, "hex"),
  scopes: new Set(e.scopes as Grant[]),
  notAfter: e.not_after === undefined ? undefined : Date.parse(e.not_after),
});

/** Writes `text` to `path` so a reader sees the old file or the new one, never a part. */
function replaceFile(path: string, text: string, mode: number): void {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  writeFileSync(tmp, text, { mode, flag: "w" });
  renameSync(tmp, path);
}

export interface TokenRegistryOptions {
  /** The agent's own token with every scope: `HOSTKEEPER_TOKEN`, or the generated `<data dir>/token`. */
  own: { secret: string; path: string | undefined };
  /** `HOSTKEEPER_TOKENS_FILE`. */
  tokensFile: string | undefined;
  overlapMs: number;
  now: () => number;
  log: Logger;
  /** How often the tokens file is stat'ed, beside the file-system watch (which may miss a change). */
  pollMs?: number;
}

/**
 * Every token the agent accepts: its own (every scope) and those of the tokens file, read again when the
 * file changes (a watch on its directory, since tools replace it by renaming, and a stat poll for file
 * systems whose watch says nothing). A file that cannot be read or parsed keeps the tokens loaded before.
 */
export class TokenRegistry {
  private own: Entry[];
  private fileEntries: Entry[] = [];
  private fileStamp = "";
  private failedStamp = "";
  private watcher: FSWatcher | undefined;
  private poll: Periodic | undefined;
  private debounce: NodeJS.Timeout | undefined;

  constructor(private readonly opts: TokenRegistryOptions) {
    this.own = [this.ownEntry(opts.own.secret, undefined)];
    const previous = this.readPrevious();
    if (previous) this.own.push(previous);
    if (opts.tokensFile) {
      // At start there is no earlier set to keep: a broken file stops the start, naming it.
      const path = opts.tokensFile;
      try {
        this.fileStamp = this.stamp(path);
        this.fileEntries = parseTokensFile(readFileSync(path, "utf8")).entries.map(toEntry);
        this.warnIfWritableByOthers(path);
      } catch (err) {
        throw new Error(`HOSTKEEPER_TOKENS_FILE ${path}: ${(err as Error).message}`);
      }
    }
  }

  private ownEntry(secret: string, notAfter: number | undefined): Entry {
    return { name: DEFAULT_TOKEN_NAME, hash: sha256(secret), scopes: new Set<Grant>(["*"]), notAfter };
  }

  /** `<data dir>/token.previous`: the hash of the agent's own token before its last rotation, and its end. */
  private get previousPath(): string | undefined {
    return this.opts.own.path === undefined ? undefined : `${this.opts.own.path}.previous`;
  }

  private readPrevious(): Entry | undefined {
    const path = this.previousPath;
    if (path === undefined) return undefined;
    try {
      const { sha256: hash, not_after } = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
      if (typeof hash !== "string" || typeof not_after !== "string") return undefined;
      return { ...this.ownEntry("", Date.parse(not_after)), hash: Buffer.from(hash, "hex") };
    } catch {
      return undefined;
    }
  }

  /** Starts following the tokens file. */
  start(): void {
    const path = this.opts.tokensFile;
    if (!path) return;
    try {
      this.watcher = watch(dirname(path), (_event, name) => {
        if (name === null || name === basename(path)) this.scheduleReload();
      });
      this.watcher.on("error", (err) => this.opts.log.warn({ err }, "watching the tokens file failed"));
      this.watcher.unref();
    } catch (err) {
      this.opts.log.warn({ err, path }, "cannot watch the tokens file; relying on polling");
    }
    this.poll = new Periodic({
      intervalMs: this.opts.pollMs ?? 2000,
      round: () => this.reloadIfChanged(),
      what: "reading the tokens file",
      log: this.opts.log,
    });
    this.poll.start();
  }

  close(): void {
    this.watcher?.close();
    void this.poll?.stop();
    clearTimeout(this.debounce);
  }

  private scheduleReload(): void {
    clearTimeout(this.debounce);
    // A tool writing in place emits several events; read once it has finished.
    this.debounce = setTimeout(() => this.reloadIfChanged(), 50);
    this.debounce.unref();
  }

  /** Whoever can write the file can give themselves every scope: said once per version of the file. */
  private warnIfWritableByOthers(path: string): void {
    const st = statSync(path);
    const uid = process.getuid?.();
    if ((st.mode & 0o022) !== 0 || (uid !== undefined && st.uid !== uid && st.uid !== 0))
      this.opts.log.warn(
        { path, mode: (st.mode & 0o777).toString(8), uid: st.uid },
        "the tokens file can be written by another user than the agent's or root: whoever can write it can grant any scope",
      );
  }

  private stamp(path: string): string {
    const st = statSync(path);
    return `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
  }

  /** Reads the tokens file when its inode, size or times changed. */
  reloadIfChanged(): void {
    const path = this.opts.tokensFile;
    if (!path) return;
    let stamp: string;
    try {
      stamp = this.stamp(path);
    } catch (err) {
      stamp = `missing:${(err as NodeJS.ErrnoException).code}`;
    }
    if (stamp === this.fileStamp || stamp === this.failedStamp) return;
    if (stamp === "missing:ENOENT") {
      // Removed, not broken: removing the file is a way to withdraw every token in it at once.
      this.fileEntries = [];
      this.fileStamp = stamp;
      this.failedStamp = "";
      this.opts.log.warn({ path }, "the tokens file was removed; only the agent's own token is accepted");
      return;
    }
    try {
      const entries = parseTokensFile(readFileSync(path, "utf8")).entries.map(toEntry);
      this.warnIfWritableByOthers(path);
      this.fileEntries = entries;
      this.fileStamp = stamp;
      this.failedStamp = "";
      this.opts.log.info({ path, tokens: entries.length }, "tokens file loaded");
    } catch (err) {
      // Logged once per version of the file, not on every poll.
      this.failedStamp = stamp;
      this.opts.log.error(
        { path, error: (err as Error).message, kept: this.fileEntries.length },
        `the tokens file cannot be used (${(err as Error).message}); keeping the ${this.fileEntries.length} tokens loaded before`,
      );
    }
  }

  /**
   * The principal of an `Authorization: Bearer` value, undefined when it names no valid token. The
   * presented secret's hash is compared with every entry's in constant time, all of them, so the time
   * taken says nothing about which entry or how much of one matched.
   */
  authenticate(header: string | undefined): Principal | undefined {
    const m = header ? /^Bearer[ ]+(\S+)\s*$/i.exec(header) : null;
    if (!m?.[1]) return undefined;
    const presented = sha256(m[1]);
    const now = this.opts.now();
    let found: Entry | undefined;
    for (const e of [...this.own, ...this.fileEntries]) {
      const equal = timingSafeEqual(presented, e.hash);
      if (equal && found === undefined && (e.notAfter === undefined || now < e.notAfter)) found = e;
    }
    return found ? { name: found.name, scopes: found.scopes } : undefined;
  }

  /**
   * A new secret for `name`, returned once; the old one stays valid for the configured overlap. The
   * agent's own token is rotated in `<data dir>/token` (its old hash in `token.previous`); a token of the
   * tokens file in that file, as a second entry of the same name with `not_after`.
   */
  rotate(name: string): { secret: string; previousValidUntil: string } {
    const secret = generateToken();
    const until = new Date(this.opts.now() + this.opts.overlapMs);
    if (name === DEFAULT_TOKEN_NAME) this.rotateOwn(secret, until);
    else this.rotateInFile(name, secret, until);
    return { secret, previousValidUntil: until.toISOString() };
  }

  private rotateOwn(secret: string, until: Date): void {
    const path = this.opts.own.path;
    const previousPath = this.previousPath;
    if (path === undefined || previousPath === undefined)
      throw new TokenRotationError(
        "not_rotatable",
        "the agent's token is set by HOSTKEEPER_TOKEN (configuration): change it there and restart the agent",
      );
    const old = this.own[0];
    if (!old) throw new Error("the agent's own token is missing");
    try {
      // The old secret's hash first: a crash in between leaves both valid, never neither.
      replaceFile(
        previousPath,
        `${JSON.stringify({ sha256: old.hash.toString("hex"), not_after: until.toISOString() })}\n`,
        0o600,
      );
      replaceFile(path, `${secret}\n`, 0o600);
    } catch (err) {
      throw new TokenRotationError("failed", `the new token could not be written to ${path}`, {
        cause: err,
      });
    }
    this.own = [this.ownEntry(secret, undefined), { ...old, notAfter: until.getTime() }];
  }

  private rotateInFile(name: string, secret: string, until: Date): void {
    const path = this.opts.tokensFile;
    const unknown = () =>
      new TokenRotationError(
        "not_found",
        `no token named ${name} (the agent's own token is "${DEFAULT_TOKEN_NAME}")`,
      );
    if (!path) throw unknown();
    let parsed: ReturnType<typeof parseTokensFile>;
    let mode: number;
    try {
      mode = statSync(path).mode & 0o777;
      parsed = parseTokensFile(readFileSync(path, "utf8"));
    } catch (err) {
      throw new TokenRotationError("failed", `the tokens file cannot be read: ${(err as Error).message}`, {
        cause: err,
      });
    }
    const now = this.opts.now();
    const current = parsed.entries.find((e) => e.name === name && e.not_after === undefined);
    if (!current) throw unknown();
    const tokens: FileEntry[] = [];
    for (const e of parsed.entries) {
      // Old secrets whose overlap has ended go; everything else, unknown keys included, stays.
      if (e.not_after !== undefined && Date.parse(e.not_after) <= now) continue;
      if (e !== current) tokens.push(e);
      else
        tokens.push(
          { ...e, sha256: sha256(secret).toString("hex") },
          { ...e, not_after: until.toISOString() },
        );
    }
    try {
      replaceFile(path, `${JSON.stringify({ ...parsed.raw, tokens }, null, 2)}\n`, mode);
    } catch (err) {
      throw new TokenRotationError("failed", "the tokens file could not be written", { cause: err });
    }
    // At once rather than at the watch's next event: the caller may use the new secret straight away.
    this.reloadIfChanged();
  }
}
