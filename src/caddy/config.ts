import { sameJson } from "../util/canonical-json.js";
import { retried } from "../util/retry.js";
import { type CaddyAdmin, CaddyApiError, type CallOptions, caddyErrorText } from "./admin.js";

/** Keys from the root of Caddy's config: `["apps", "http", "http_port"]`. */
export type ConfigKeys = readonly string[];

/** The admin API's path of `keys` (`/config/` for none). */
export const configPath = (keys: ConfigKeys) => `/config/${keys.map(encodeURIComponent).join("/")}`;

/**
 * Caddy's answer to a read of a path through a key that is missing, or that holds no object: 400 ("invalid
 * traversal path at ...") or 404. A read of a missing last key answers 200 with `null`.
 */
export const throughMissingKey = (status: number) => status === 400 || status === 404;

/** Milliseconds as a Caddy duration string (`2m`, `90s`, `1500ms`). */
export function caddyDuration(ms: number): string {
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

/** `value` set at `keys` inside `into` (created as objects as needed); returns `into`. */
export function setIn(
  into: Record<string, unknown>,
  keys: readonly string[],
  value: unknown,
): Record<string, unknown> {
  let node = into;
  keys.forEach((k, i) => {
    if (i === keys.length - 1) node[k] = value;
    else {
      const next = node[k];
      if (!next || typeof next !== "object" || Array.isArray(next)) node[k] = {};
      node = node[k] as Record<string, unknown>;
    }
  });
  return into;
}

/**
 * What must be at a path, given what is there (undefined: nothing); undefined when nothing must be there.
 * Returning `current` itself says it is in line without comparing. Called again after a lost race (see
 * ATTEMPTS), so it only computes.
 */
export type Want = (current: unknown) => unknown;

export interface ChangeOptions {
  /**
   * How many leading keys must exist for the value to be written: the keys below are created with it
   * (their objects holding it). When one of those is missing the change waits for whoever creates it
   * (`missing`). Default 0: every key may be created, not the config itself.
   */
  needs?: number;
  /** With `needs` 0: a Caddy with no config at all gets one holding the path (else that is `missing`). */
  createConfig?: boolean;
  /** Tells from Caddy's text of a value that it is in line, sparing the parse (thousands of routes). */
  inLine?: (text: string) => boolean;
  /** Whether what must be there is what is there; by default the same canonical JSON. */
  same?: (want: unknown, current: unknown) => boolean;
  /**
   * What a write that creates the object at `at` (the first missing key) sends instead of `value` (that
   * object holding the path's value): what else it must hold from its first load. It may bring other parts
   * of the config in line first, as long as none lies under `at`.
   */
  creating?: (at: ConfigKeys, value: unknown) => Promise<unknown> | unknown;
}

/** One write with If-Match of the read it was planned from. */
interface Write {
  method: "PUT" | "POST" | "PATCH" | "DELETE";
  path: string;
  body?: unknown;
  etag: string;
  /** The keys of the object the write creates, when the path was absent. */
  created?: ConfigKeys;
}

/** A path read and what bringing it in line takes (see `CaddyConfig.plan`). */
export interface Planned {
  readonly keys: ConfigKeys;
  readonly want: Want;
  readonly opts: ChangeOptions;
  /** A key among the first `needs` is missing: nothing can be written until it exists. */
  missing: boolean;
  /** What the path held; undefined when nothing (or when the inLine hook spared the parse). */
  before: unknown;
  /** The write that brings it in line; undefined when it is in line or missing. */
  write?: Write;
}

/** What bringing a path in line did. */
export interface Applied {
  written: boolean;
  missing: boolean;
  before: unknown;
  /** The keys of the object the write created (its parent existed), when the path was absent. */
  created?: ConfigKeys;
}

/** Where a path was found: the read of the path itself, or of the first missing key above it (null). */
interface Found {
  text: string;
  /** How many keys were read: all of them, or up to the first missing one, whose read answered null. */
  depth: number;
  etag: string;
}

/**
 * How many times a change is planned and written at most. A write answered 412 (If-Match failed) or 409
 * (the key a PUT creates appeared, or a key on the path stopped being missing while it was read) lost a
 * race with another writer of the same part: the part is read again and `want` computed again from what
 * is there then. The third lost race is thrown: a part changed that often is contended, not raced.
 */
const ATTEMPTS = 3;

const lostRace = (err: unknown) => err instanceof CaddyApiError && (err.status === 412 || err.status === 409);

/** Caddy's text of a read value is `null` (the key is missing), without parsing a large one. */
const isNull = (text: string) => text.length < 16 && text.trim() === "null";

/**
 * Caddy's config, read and brought in line one path at a time through the admin API. A change is a path
 * and a function from what is there to what must be there: it is read, compared canonically, and written
 * only when it differs, as one request with If-Match of that read (one config change, one reload): PATCH
 * over a value, DELETE when nothing must be there, PUT creating the first missing key (holding the rest of
 * the path) when it is absent. A lost race is retried by one rule (ATTEMPTS). Every writer of Caddy's
 * config but the routes' batches goes through here, and so does the one rule for a missing parent (`locate`).
 */
export class CaddyConfig {
  constructor(
    private readonly admin: CaddyAdmin,
    /** The options of every call this makes (a probe's time-out; not counted in the metrics). */
    private readonly call: CallOptions = {},
  ) {}

  /** Caddy's text of the value at `keys`; undefined when the path, or a key above it, is missing. */
  async text(keys: ConfigKeys): Promise<string | undefined> {
    const res = await this.admin.read(configPath(keys), this.call);
    if (throughMissingKey(res.status)) return undefined;
    if (res.status !== 200) throw new CaddyApiError(res.status, caddyErrorText(res));
    return res.text;
  }

  /** The value at `keys`; undefined when it, or a key above it, is missing. */
  async value<T>(keys: ConfigKeys): Promise<T | undefined> {
    const text = await this.text(keys);
    return text === undefined ? undefined : ((JSON.parse(text) as T | null) ?? undefined);
  }

  /**
   * Whether the object at `keys` is missing, after a read of a path below it answered `status`: the answer
   * of a missing key (`throughMissingKey`), and the object itself reads as missing too.
   */
  async isMissing(keys: ConfigKeys, status: number): Promise<boolean> {
    if (!throughMissingKey(status)) return false;
    const found = await this.locate(keys, { needs: keys.length - 1 });
    return found === undefined || isNull(found.text);
  }

  /** Whether the value at `keys` differs from what `want` makes of it; reads only. Missing: it does not. */
  async differs(keys: ConfigKeys, want: Want, opts: ChangeOptions = {}): Promise<boolean> {
    return (await this.plan(keys, want, opts)).write !== undefined;
  }

  /** Brings the value at `keys` in line with `want`: `plan`, then `apply`. */
  update(keys: ConfigKeys, want: Want, opts: ChangeOptions = {}): Promise<Applied> {
    return this.settled(() => this.plan(keys, want, opts));
  }

  /**
   * Makes the write `planned` holds, if any (several plans read together are applied in their order). A
   * lost race plans the change again from a new read (ATTEMPTS).
   */
  apply(planned: Planned): Promise<Applied> {
    let first: Planned | undefined = planned;
    return this.settled(async () => {
      const p = first ?? (await this.plan(planned.keys, planned.want, planned.opts));
      first = undefined;
      return p;
    });
  }

  /** Reads the value at `keys` and plans the write that brings it in line with `want`, if it differs. */
  async plan(keys: ConfigKeys, want: Want, opts: ChangeOptions = {}): Promise<Planned> {
    const found = await this.locate(keys, opts);
    if (found === undefined) return { keys, want, opts, missing: true, before: undefined };
    const there = found.depth === keys.length && !isNull(found.text);
    if (there && opts.inLine?.(found.text)) return { keys, want, opts, missing: false, before: undefined };
    const current: unknown = there ? JSON.parse(found.text) : undefined;
    const next = want(current);
    const inLine =
      next === current ||
      (next !== undefined && current !== undefined && (opts.same ?? sameJson)(next, current));
    const planned = { keys, want, opts, missing: false, before: current };
    return inLine ? planned : { ...planned, write: writeFor(keys, found, current, next) };
  }

  /** Plans and writes until the write lands, is not needed, or loses its last race. */
  private settled(plan: () => Promise<Planned>): Promise<Applied> {
    return retried(async () => this.written(await plan()), {
      attempts: ATTEMPTS,
      delayMs: () => 0,
      retryable: lostRace,
    });
  }

  private async written(p: Planned): Promise<Applied> {
    const w = p.write;
    if (w === undefined) return { written: false, missing: p.missing, before: p.before };
    let body = w.body;
    if (w.created && p.opts.creating) body = await p.opts.creating(w.created, body);
    await this.admin.write(w.method, w.path, body, w.etag, this.call);
    return { written: true, missing: false, before: p.before, ...(w.created ? { created: w.created } : {}) };
  }

  /**
   * The one rule for a missing parent. The path is read deepest first, as the value itself is what is
   * usually there and a read of a parent may hold far more (every route): a read answered as through a
   * missing key (`throughMissingKey`) is followed by a read of the path one key shorter, which, as its
   * child could not be read, holds no object and is small. The first read answered 200 says where the path
   * ends: the value, or `null` at the first missing key (which a write creates). Keys among the first
   * `needs` are never read (the config itself only with `createConfig`): when every read above them fails,
   * one of them is missing, and undefined says so. A key above the first missing one that holds something
   * other than an object is a conflict (409).
   */
  private async locate(keys: ConfigKeys, opts: ChangeOptions): Promise<Found | undefined> {
    const needs = opts.needs ?? 0;
    const lowest = needs === 0 && opts.createConfig ? 0 : needs + 1;
    for (let depth = keys.length; depth >= lowest; depth--) {
      const res = await this.admin.read(configPath(keys.slice(0, depth)), this.call);
      if (throughMissingKey(res.status)) continue;
      if (res.status !== 200 || !res.etag) throw new CaddyApiError(res.status, caddyErrorText(res));
      if (depth === keys.length || isNull(res.text)) return { text: res.text, depth, etag: res.etag };
      throw new CaddyApiError(
        409,
        `${keys.slice(0, depth).join(".")} in Caddy's config is not an object, so ${keys.join(".")} cannot be set`,
      );
    }
    return undefined;
  }
}

/** The write that puts `next` where `found` was read, over `current` (undefined: nothing there). */
function writeFor(keys: ConfigKeys, found: Found, current: unknown, next: unknown): Write {
  const { etag, depth } = found;
  if (next === undefined) return { method: "DELETE", path: configPath(keys), etag };
  if (current !== undefined) return { method: "PATCH", path: configPath(keys), body: next, etag };
  // The first missing key is created holding the rest of the path: PUT answers 409 when it appeared
  // meanwhile. The config itself is always a key to PUT, so an empty Caddy's is set by POST.
  const at = keys.slice(0, depth);
  const rest = keys.slice(depth);
  const body = rest.length === 0 ? next : setIn({}, rest, next);
  return { method: depth === 0 ? "POST" : "PUT", path: configPath(at), body, etag, created: at };
}
