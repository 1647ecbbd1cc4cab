import { fs } from "./util/node-builtins.js";

const { existsSync, readFileSync } = fs;

/**
 * The setting mechanism. Every setting is declared once, beside its area (`<area>/settings.ts`; the agent's
 * own in `settings.ts`): its config-file key, its environment variable, its default and its parser. The
 * configuration table of docs/configuration.md is generated from them (`npm run docs:config`), and a test keeps the two in
 * step. Precedence: environment > config file > default.
 */
export interface Setting<T> {
  readonly key: string;
  readonly env: string;
  readonly area: "agent" | "proxy" | "events" | "system" | "operator";
  readonly doc: string;
  /** Shown in docs/configuration.md; `undefined` for settings without a default. */
  readonly defaultText: string;
  readonly default: T;
  /** Parses the raw value (a string from the environment, or any JSON value from the file). Throws on bad input. */
  readonly parse: (raw: unknown) => T;
  /** A secret: `hostkeeper config check` masks its value (each value, for an object). */
  readonly secret?: boolean;
  /**
   * The value as a person would write it, where the generic display (strings, numbers, lists) misleads.
   * A method, so that a `Setting<T>` still is a `Setting<unknown>`.
   */
  show?(value: T): string;
}

export class ConfigError extends Error {
  constructor(
    readonly setting: string,
    message: string,
  ) {
    super(`invalid configuration: ${setting}: ${message}`);
    this.name = "ConfigError";
  }
}

const asString = (raw: unknown): string => {
  if (typeof raw === "string") return raw.trim();
  if (typeof raw === "number" || typeof raw === "boolean") return String(raw);
  throw new Error("expected a string");
};

export const parse = {
  string:
    (opts: { nonEmpty?: boolean } = {}) =>
    (raw: unknown): string => {
      const s = asString(raw);
      if (opts.nonEmpty && s === "") throw new Error("must not be empty");
      return s;
    },
  optionalString: (raw: unknown): string | undefined => {
    const s = asString(raw);
    return s === "" ? undefined : s;
  },
  int:
    (min: number, max: number) =>
    (raw: unknown): number => {
      const s = asString(raw);
      if (!/^-?\d+$/.test(s)) throw new Error(`expected an integer, got "${s}"`);
      const n = Number(s);
      if (n < min || n > max) throw new Error(`must be between ${min} and ${max}, got ${n}`);
      return n;
    },
  bool: (raw: unknown): boolean => {
    if (typeof raw === "boolean") return raw;
    const s = asString(raw).toLowerCase();
    if (["1", "true", "yes", "on"].includes(s)) return true;
    if (["0", "false", "no", "off"].includes(s)) return false;
    throw new Error(`expected true or false, got "${s}"`);
  },
  enumOf:
    <const V extends string>(values: readonly V[]) =>
    (raw: unknown): V => {
      const s = asString(raw);
      if (!(values as readonly string[]).includes(s))
        throw new Error(`must be one of ${values.join(", ")}, got "${s}"`);
      return s as V;
    },
  list: (raw: unknown): string[] => {
    if (Array.isArray(raw)) return raw.map(asString).filter((s) => s !== "");
    return asString(raw)
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s !== "");
  },
  hostPort: (raw: unknown): { host: string; port: number } => {
    const s = asString(raw);
    const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(s);
    const host = m?.[1] ?? m?.[2];
    const port = Number(m?.[3]);
    if (!m || !host || !(port >= 0 && port <= 65535)) throw new Error(`expected host:port, got "${s}"`);
    return { host, port };
  },
};

export function setting<T>(s: Setting<T>): Setting<T> {
  return s;
}

type Values<S> = { [K in keyof S]: S[K] extends Setting<infer T> ? T : never };

export interface ConfigSource {
  env: NodeJS.ProcessEnv;
  /** Parsed config file (JSON object), or undefined when there is none. */
  file?: Record<string, unknown>;
}

/**
 * The config file the agent reads: the one named by HOSTKEEPER_CONFIG (which must exist), else
 * /etc/hostkeeper/config.json when present; undefined when there is none.
 */
export function configFilePath(env: NodeJS.ProcessEnv): string | undefined {
  const explicit = env.HOSTKEEPER_CONFIG?.trim();
  const path = explicit || "/etc/hostkeeper/config.json";
  return !explicit && !existsSync(path) ? undefined : path;
}

/** Reads the config file of `configFilePath`, or undefined when there is none. */
export function readConfigFile(env: NodeJS.ProcessEnv): Record<string, unknown> | undefined {
  const path = configFilePath(env);
  if (path === undefined) return undefined;
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError("HOSTKEEPER_CONFIG", `cannot read ${path}: ${(err as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ConfigError("HOSTKEEPER_CONFIG", `${path} is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new ConfigError("HOSTKEEPER_CONFIG", `${path} must hold a JSON object`);
  return value as Record<string, unknown>;
}

export type SettingOrigin = "environment" | "file" | "default";

/** Where a setting's value comes from: a non-empty environment variable, else a non-null file key, else the default. */
export function settingInput(
  s: Setting<unknown>,
  source: ConfigSource,
): { origin: SettingOrigin; raw: unknown } {
  const envValue = source.env[s.env];
  if (envValue !== undefined && envValue !== "") return { origin: "environment", raw: envValue };
  const fileValue = source.file?.[s.key];
  if (fileValue !== undefined && fileValue !== null) return { origin: "file", raw: fileValue };
  return { origin: "default", raw: undefined };
}

/** The config-file keys of the settings whose value comes from the environment or the config file, not a default. */
export function explicitSettings(settings: Iterable<Setting<unknown>>, source: ConfigSource): Set<string> {
  const keys = new Set<string>();
  for (const s of settings) if (settingInput(s, source).origin !== "default") keys.add(s.key);
  return keys;
}

/** Resolves one group of settings from environment, file and defaults; fails on the first bad value. */
export function resolveSettings<S extends Record<string, Setting<unknown>>>(
  settings: S,
  source: ConfigSource,
): Values<S> {
  const out: Record<string, unknown> = {};
  for (const [name, s] of Object.entries(settings)) {
    const { origin, raw } = settingInput(s, source);
    if (origin === "default") {
      out[name] = s.default;
      continue;
    }
    try {
      out[name] = s.parse(raw);
    } catch (err) {
      throw new ConfigError(
        origin === "environment" ? s.env : `${s.key} (config file)`,
        (err as Error).message,
      );
    }
  }
  return out as Values<S>;
}

/** Rejects keys in the config file that no setting knows, so a typo does not pass silently. */
export function checkUnknownFileKeys(
  file: Record<string, unknown> | undefined,
  known: Iterable<Setting<unknown>>,
) {
  if (!file) return;
  const keys = new Set([...known].map((s) => s.key));
  for (const k of Object.keys(file)) {
    if (!keys.has(k)) throw new ConfigError(`${k} (config file)`, "unknown setting");
  }
}
