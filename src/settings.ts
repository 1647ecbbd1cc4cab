import { resolve } from "node:path";
import { accessSettings } from "./access/settings.js";
import { accessLogSettings } from "./access-logs/settings.js";
import { agentUpdateSettings } from "./agent-update/settings.js";
import { checkIssuancePairs } from "./caddy/issuance-settings.js";
import { certificateSettings } from "./certificates/settings.js";
import {
  type ConfigSource,
  checkUnknownFileKeys,
  explicitSettings,
  parse,
  readConfigFile,
  resolveSettings,
  type Setting,
  setting,
} from "./config.js";
import { checkConnectPairs, connectSettings } from "./connect/settings.js";
import { eventSettings } from "./events/settings.js";
import { checkListenerPairs, listenerSettings } from "./listener/settings.js";
import { operatorSettings } from "./operator/settings.js";
import { proxySettings } from "./proxy/settings.js";
import { systemSettings } from "./system/settings.js";
import { hostPort } from "./util/urls.js";

/** The agent's own settings: its listener, its data, its log, and the limits of its HTTP server. */
export const agentSettings = {
  listen: setting({
    key: "listen",
    env: "HOSTKEEPER_LISTEN",
    area: "agent",
    doc: "Address of the agent's HTTP API, `host:port`. Keep it on loopback or a private interface. `off`: the agent listens on nothing, and is reached only through its connection to the control plane (`HOSTKEEPER_CONNECT_URL`, which `off` then needs; docs/connect.md); the CLI, which speaks to this address, then has no agent to reach.",
    defaultText: "127.0.0.1:8626",
    default: { host: "127.0.0.1", port: 8626 } as { host: string; port: number } | "off",
    parse: (raw: unknown) => (raw === "off" ? ("off" as const) : parse.hostPort(raw)),
    show: (v: { host: string; port: number } | "off") => (v === "off" ? "off" : hostPort(v)),
  }),
  token: setting({
    key: "token",
    env: "HOSTKEEPER_TOKEN",
    area: "agent",
    doc: "Bearer token with every scope (`*`), for every endpoint but the probes `GET /healthz` and `GET /readyz`. When unset, one is generated at first start into `<data dir>/token` (mode 0600), which `hostkeeper token rotate` can rotate; a token set here cannot be.",
    defaultText: "generated",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw);
      if (s !== undefined && s.length < 16) throw new Error("must be at least 16 characters");
      return s;
    },
    secret: true,
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
  logFormat: setting({
    key: "logFormat",
    env: "HOSTKEEPER_LOG_FORMAT",
    area: "agent",
    doc: "Log format on stdout: `json` (one object a line, for journald and log shippers), `pretty` (one coloured line per entry, for people), or `auto`: pretty when stdout is a terminal, JSON otherwise. Times are ISO 8601 (UTC) in both.",
    defaultText: "auto",
    default: "auto" as const,
    parse: parse.enumOf(["auto", "json", "pretty"] as const),
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

/**
 * The composition of every area's settings. An area adds its group here; the table of docs/configuration.md and the
 * unknown-key check of the config file follow from this list.
 */
export const settingGroups = {
  agent: agentSettings,
  access: accessSettings,
  listener: listenerSettings,
  events: eventSettings,
  proxy: proxySettings,
  certificates: certificateSettings,
  accessLogs: accessLogSettings,
  system: systemSettings,
  operator: operatorSettings,
  agentUpdate: agentUpdateSettings,
  connect: connectSettings,
};

type Groups = typeof settingGroups;
export type AppConfig = { [G in keyof Groups]: ReturnType<typeof resolveSettings<Groups[G]>> } & {
  /**
   * The config-file keys of the settings set in the environment or the config file: what a setting asks
   * for, as against a default (a Caddy of the user's own gets only what is asked, caddy/agent-fields.ts).
   */
  explicit: ReadonlySet<string>;
};

export function allSettings(): Setting<unknown>[] {
  return Object.values(settingGroups).flatMap((g) => Object.values(g) as Setting<unknown>[]);
}

/** A setting's environment variable, from its config-file key. */
export function settingEnv(key: string): string {
  return allSettings().find((s) => s.key === key)?.env ?? key;
}

export function loadConfig(source: ConfigSource): AppConfig {
  checkUnknownFileKeys(source.file, allSettings());
  const out: Record<string, unknown> = {};
  for (const [name, group] of Object.entries(settingGroups)) {
    out[name] = resolveSettings(group as Record<string, Setting<unknown>>, source);
  }
  checkListenerPairs((out as AppConfig).listener);
  checkIssuancePairs((out as AppConfig).proxy);
  checkConnectPairs((out as AppConfig).connect, (out as AppConfig).agent.listen);
  out.explicit = explicitSettings(allSettings(), source);
  return out as AppConfig;
}

/** What the agent's process configures itself from: its environment and the config file it names. */
export function configSourceFromProcess(env: NodeJS.ProcessEnv = process.env): ConfigSource {
  return { env, file: readConfigFile(env) };
}

export function loadConfigFromProcess(env: NodeJS.ProcessEnv = process.env): AppConfig {
  return loadConfig(configSourceFromProcess(env));
}

/** The configuration table of docs/configuration.md, one row per setting. */
export function configTableMarkdown(): string {
  const rows = allSettings().map(
    (s) =>
      `| \`${s.env}\` | \`${s.key}\` | ${s.defaultText.startsWith("`") ? s.defaultText : `\`${s.defaultText}\``} | ${s.doc} |`,
  );
  return [
    "| Environment variable | Config-file key | Default | Meaning |",
    "|---|---|---|---|",
    ...rows,
  ].join("\n");
}
