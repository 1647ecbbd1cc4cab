import { canonicalJson } from "../util/canonical-json.js";
import { type CaddyAdmin, CaddyApiError, caddyErrorText } from "./admin.js";

/**
 * A value the agent keeps at one path of Caddy's config outside the routes (`grace_period`, the TLS issuer,
 * `install_trust`): written alone, so the agent never replaces an object other parts of it or Caddy's
 * operator also write.
 */
export interface ConfigField {
  /** Keys from the config's root: `["apps", "http", "http_port"]`. */
  path: readonly string[];
  /**
   * How many leading keys of `path` must exist for the field to be written on its own: the keys below are
   * created with it. Above that, the field waits for the agent to create its parent (the HTTP app, the
   * managed server), which carries it (see `nestFields`).
   */
  needs: number;
  /**
   * The value the field must hold, given the one it holds (undefined: none); undefined when it must hold
   * none. A value equal to `current` (as canonical JSON) means the field is in line.
   */
  want(current: unknown): unknown;
}

/** What a field holds now, and where it would be written from. */
interface FieldState {
  current: unknown;
  /** How many keys of `path` lead to the one a write creates or replaces: the first missing one, else all. */
  createAt: number;
  /** ETag of the read of `path` cut at `createAt`. */
  etag: string;
}

const configPath = (keys: readonly string[]) => `/config/${keys.map(encodeURIComponent).join("/")}`;

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
 * The fields that lie under `at`, set into `into` (the object about to be created at `at`, which it
 * returns): an object the agent creates holds them from its first load.
 */
export function nestFields(
  fields: readonly ConfigField[],
  at: readonly string[],
  into: Record<string, unknown> = {},
): Record<string, unknown> {
  for (const f of fields) {
    if (f.path.length <= at.length || at.some((k, i) => f.path[i] !== k)) continue;
    const value = f.want(undefined);
    if (value !== undefined) setIn(into, f.path.slice(at.length), value);
  }
  return into;
}

const same = (a: unknown, b: unknown) => canonicalJson(a) === canonicalJson(b);

/**
 * Fields of Caddy's config, read and brought in line through the admin API: each as one write carrying
 * If-Match on what was read, made only when it differs. Reads stay small: where a parent is missing the
 * read of a deeper key says so (Caddy answers 400 to a path through a missing key), so no parent object,
 * which may hold every route, is ever read.
 */
export class CaddyConfigFields {
  constructor(private readonly admin: CaddyAdmin) {}

  /** The fields among `fields` that can be written now and hold another value than they must. */
  async differing(fields: readonly ConfigField[]): Promise<ConfigField[]> {
    const states = await Promise.all(fields.map((f) => this.state(f)));
    return fields.filter((f, i) => {
      const s = states[i];
      return s !== undefined && !same(f.want(s.current), s.current);
    });
  }

  /**
   * Brings each field in line, in the order given (the trust setting before the issuer that would use
   * it); returns the paths written. A field changed meanwhile by another writer is read again once.
   */
  async conform(fields: readonly ConfigField[]): Promise<string[]> {
    const written: string[] = [];
    for (const f of fields) {
      for (let attempt = 0; ; attempt++) {
        try {
          if (await this.conformOne(f)) written.push(f.path.join("."));
          break;
        } catch (err) {
          const raced = err instanceof CaddyApiError && (err.status === 412 || err.status === 409);
          if (!raced || attempt > 0) throw err;
        }
      }
    }
    return written;
  }

  private async conformOne(f: ConfigField): Promise<boolean> {
    const s = await this.state(f);
    if (s === undefined) return false;
    const want = f.want(s.current);
    if (same(want, s.current)) return false;
    const path = configPath(f.path);
    if (want === undefined) await this.admin.write("DELETE", path, undefined, s.etag);
    else if (s.current !== undefined) await this.admin.write("PATCH", path, want, s.etag);
    else {
      // PUT creates the first missing key (409 if it appeared meanwhile), holding the rest of the path.
      const from = f.path.slice(0, s.createAt);
      const rest = f.path.slice(s.createAt);
      const value = rest.length === 0 ? want : setIn({}, rest, want);
      await this.admin.write("PUT", configPath(from), value, s.etag);
    }
    return true;
  }

  /** The field's state; undefined when a key of its first `needs` is missing (its parent is not there yet). */
  private async state(f: ConfigField): Promise<FieldState | undefined> {
    for (let depth = f.path.length; depth > f.needs; depth--) {
      const res = await this.admin.read(configPath(f.path.slice(0, depth)));
      if (res.status === 400 || res.status === 404) continue;
      if (res.status !== 200 || !res.etag) throw new CaddyApiError(res.status, caddyErrorText(res));
      const value = JSON.parse(res.text) as unknown;
      if (depth === f.path.length) return { current: value ?? undefined, createAt: depth, etag: res.etag };
      if (value !== null)
        throw new CaddyApiError(
          409,
          `${f.path.slice(0, depth).join(".")} in Caddy's config is not an object, so ${f.path.join(".")} cannot be set`,
        );
      return { current: undefined, createAt: depth, etag: res.etag };
    }
    return undefined;
  }
}
