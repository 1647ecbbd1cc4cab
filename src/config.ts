import { existsSync, readFileSync } from "node:fs";
import { isIP } from "node:net";
import { resolve } from "node:path";

/**
 * Every setting has one entry here: its config-file key, its environment variable, its default and its
 * parser. The README's configuration table is generated from this list (`npm run docs:config`), and a test
 * keeps the two in step. Precedence: environment > config file > default.
 */
export interface Setting<T> {
  readonly key: string;
  readonly env: string;
  readonly area: "agent" | "proxy" | "events" | "system" | "operator";
  readonly doc: string;
  /** Shown in the README; `undefined` for settings without a default. */
  readonly defaultText: string;
  readonly default: T;
  /** Parses the raw value (a string from the environment, or any JSON value from the file). Throws on bad input. */
  readonly parse: (raw: unknown) => T;
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

export const agentSettings = {
  listen: setting({
    key: "listen",
    env: "HOSTKEEPER_LISTEN",
    area: "agent",
    doc: "Address of the agent's HTTP API, `host:port`. Keep it on loopback or a private interface.",
    defaultText: "127.0.0.1:8626",
    default: { host: "127.0.0.1", port: 8626 },
    parse: parse.hostPort,
  }),
  token: setting({
    key: "token",
    env: "HOSTKEEPER_TOKEN",
    area: "agent",
    doc: "Bearer token for every `/v1` endpoint. When unset, one is generated at first start into `<data dir>/token` (mode 0600).",
    defaultText: "generated",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw);
      if (s !== undefined && s.length < 16) throw new Error("must be at least 16 characters");
      return s;
    },
  }),
  dataDir: setting({
    key: "dataDir",
    env: "HOSTKEEPER_DATA_DIR",
    area: "agent",
    doc: "Directory for the agent's database, token, webhook secret, embedded Caddy state and operator slots.",
    defaultText: "/var/lib/hostkeeper",
    default: "/var/lib/hostkeeper",
    parse: (raw) => resolve(parse.string({ nonEmpty: true })(raw)),
  }),
  logLevel: setting({
    key: "logLevel",
    env: "HOSTKEEPER_LOG_LEVEL",
    area: "agent",
    doc: "pino log level.",
    defaultText: "info",
    default: "info" as const,
    parse: parse.enumOf(["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const),
  }),
  bodyLimit: setting({
    key: "bodyLimit",
    env: "HOSTKEEPER_BODY_LIMIT",
    area: "agent",
    doc: "Largest accepted request body in bytes; larger bodies get 413.",
    defaultText: "1048576",
    default: 1_048_576,
    parse: parse.int(1024, 64 * 1_048_576),
  }),
  requestTimeoutMs: setting({
    key: "requestTimeoutMs",
    env: "HOSTKEEPER_REQUEST_TIMEOUT_MS",
    area: "agent",
    doc: "Time-out for one whole HTTP request to the agent (apply-updates can take minutes).",
    defaultText: "1800000",
    default: 1_800_000,
    parse: parse.int(1000, 24 * 3_600_000),
  }),
  shutdownTimeoutMs: setting({
    key: "shutdownTimeoutMs",
    env: "HOSTKEEPER_SHUTDOWN_TIMEOUT_MS",
    area: "agent",
    doc: "How long a SIGTERM/SIGINT waits for in-flight requests before the agent exits anyway.",
    defaultText: "30000",
    default: 30_000,
    parse: parse.int(0, 3_600_000),
  }),
};

export const eventSettings = {
  webhookSecret: setting({
    key: "webhookSecret",
    env: "HOSTKEEPER_WEBHOOK_SECRET",
    area: "events",
    doc: "Signing secret for callbacks, Standard Webhooks form `whsec_<base64>` (at least 24 bytes). Generated into `<data dir>/webhook-secret` when unset.",
    defaultText: "generated",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw);
      if (s === undefined) return undefined;
      const m = /^whsec_([A-Za-z0-9+/]+={0,2})$/.exec(s);
      if (!m?.[1] || Buffer.from(m[1], "base64").length < 24)
        throw new Error("expected whsec_<base64 of at least 24 bytes>");
      return s;
    },
  }),
  webhookDenyCidrs: setting({
    key: "webhookDenyCidrs",
    env: "HOSTKEEPER_WEBHOOK_DENY_CIDRS",
    area: "events",
    doc: "Comma-separated address ranges callbacks may never connect to (checked on the resolved address at connect time).",
    defaultText: "169.254.0.0/16,fe80::/10,0.0.0.0/8,::/128",
    default: ["169.254.0.0/16", "fe80::/10", "0.0.0.0/8", "::/128"],
    parse: (raw) => {
      const list = parse.list(raw);
      for (const c of list) {
        const [ip, bits] = c.split("/");
        const family = isIP(ip ?? "");
        const n = Number(bits);
        if (!family || !Number.isInteger(n) || n < 0 || n > (family === 4 ? 32 : 128))
          throw new Error(`"${c}" is not an address range`);
      }
      return list;
    },
  }),
  webhookTimeoutMs: setting({
    key: "webhookTimeoutMs",
    env: "HOSTKEEPER_WEBHOOK_TIMEOUT_MS",
    area: "events",
    doc: "Time-out of one callback delivery attempt made by the background worker.",
    defaultText: "15000",
    default: 15_000,
    parse: parse.int(100, 120_000),
  }),
  webhookFirstAttemptTimeoutMs: setting({
    key: "webhookFirstAttemptTimeoutMs",
    env: "HOSTKEEPER_WEBHOOK_FIRST_ATTEMPT_TIMEOUT_MS",
    area: "events",
    doc: "Time-out of the first delivery attempt of a change's event, started before Caddy is touched; the change goes on meanwhile and its answer waits for the attempt at most this long.",
    defaultText: "2000",
    default: 2_000,
    parse: parse.int(50, 30_000),
  }),
  webhookRetrySchedule: setting({
    key: "webhookRetrySchedule",
    env: "HOSTKEEPER_WEBHOOK_RETRY_SCHEDULE",
    area: "events",
    doc: "Comma-separated delays in seconds between delivery attempts (each with +-20% jitter); after the last, the event is dead-lettered.",
    defaultText: "5,30,120,600,1800,3600,7200,18000,36000,36000",
    default: [5, 30, 120, 600, 1800, 3600, 7200, 18000, 36000, 36000],
    parse: (raw) =>
      parse.list(raw).map((s) => {
        const n = Number(s);
        if (!(n > 0 && n <= 7 * 86400)) throw new Error(`"${s}" is not a delay in seconds`);
        return n;
      }),
  }),
};

type Values<S> = { [K in keyof S]: S[K] extends Setting<infer T> ? T : never };

export interface ConfigSource {
  env: NodeJS.ProcessEnv;
  /** Parsed config file (JSON object), or undefined when there is none. */
  file?: Record<string, unknown>;
}

/**
 * Reads the config file named by HOSTKEEPER_CONFIG (default /etc/hostkeeper/config.json when present).
 * A file named explicitly must exist.
 */
export function readConfigFile(env: NodeJS.ProcessEnv): Record<string, unknown> | undefined {
  const explicit = env.HOSTKEEPER_CONFIG?.trim();
  const path = explicit || "/etc/hostkeeper/config.json";
  if (!explicit && !existsSync(path)) return undefined;
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

/** Resolves one group of settings from environment, file and defaults; fails on the first bad value. */
export function resolveSettings<S extends Record<string, Setting<unknown>>>(
  settings: S,
  source: ConfigSource,
): Values<S> {
  const out: Record<string, unknown> = {};
  for (const [name, s] of Object.entries(settings)) {
    const envValue = source.env[s.env];
    const fileValue = source.file?.[s.key];
    const raw = envValue !== undefined && envValue !== "" ? envValue : fileValue;
    if (raw === undefined || raw === null) {
      out[name] = s.default;
      continue;
    }
    try {
      out[name] = s.parse(raw);
    } catch (err) {
      const where = envValue !== undefined && envValue !== "" ? s.env : `${s.key} (config file)`;
      throw new ConfigError(where, (err as Error).message);
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
