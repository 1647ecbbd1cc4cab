import type { CaddyAdmin, CallOptions } from "./admin.js";
import { CaddyConfig, setIn } from "./config.js";

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

/**
 * Fields of Caddy's config, read and brought in line through the admin API, each a change of CaddyConfig
 * with the field's `needs`: one write carrying If-Match on what was read, made only when it differs. Reads
 * stay small: a field is read first, and a parent only where the field could not be (CaddyConfig's rule
 * for a missing parent), so no parent object, which may hold every route, is ever read.
 */
export class CaddyConfigFields {
  private readonly config: CaddyConfig;

  constructor(admin: CaddyAdmin, call: CallOptions = {}) {
    this.config = new CaddyConfig(admin, call);
  }

  /** The fields among `fields` that can be written now and hold another value than they must. */
  async differing(fields: readonly ConfigField[]): Promise<ConfigField[]> {
    const differs = await Promise.all(
      fields.map((f) => this.config.differs(f.path, (current) => f.want(current), { needs: f.needs })),
    );
    return fields.filter((_, i) => differs[i]);
  }

  /**
   * Brings each field in line, in the order given (the trust setting before the issuer that would use
   * it); returns the paths written. A field another writer changed meanwhile is read again (CaddyConfig).
   */
  conform(fields: readonly ConfigField[]): Promise<string[]> {
    return conformFields(this.config, fields);
  }
}

/** Brings each field in line through `config`, in the order given; returns the paths written. */
export async function conformFields(config: CaddyConfig, fields: readonly ConfigField[]): Promise<string[]> {
  const written: string[] = [];
  for (const f of fields) {
    const done = await config.update(f.path, (current) => f.want(current), { needs: f.needs });
    if (done.written) written.push(f.path.join("."));
  }
  return written;
}
