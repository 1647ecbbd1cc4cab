import { agentCaddyFields, settingsAtStart } from "../caddy/agent-fields.js";
import { configFilePath, type Setting, type SettingOrigin, settingInput } from "../config.js";
import { settingEnv, settingGroups } from "../settings.js";
import { allStageHooks, hooksLine, hookWarnings } from "../system/hooks/hook-files.js";
import { loadAgentConfig } from "./agent.js";
import type { Command } from "./args.js";
import { print, table } from "./output.js";

const MASK = "[masked]";

/** A secret's value with every string in it masked; an object keeps its keys (which variables are set). */
function masked(value: unknown): unknown {
  if (value === undefined) return undefined;
  if (typeof value === "object" && value !== null && !Array.isArray(value))
    return Object.fromEntries(Object.keys(value).map((k) => [k, MASK]));
  return MASK;
}

/**
 * A value as written in the environment: lists comma-separated, the rest as JSON unless a string. Nothing
 * set is said in words: the default's own (`generated`, `embedded Caddy`), else `none`.
 */
function shown(s: Setting<unknown>, origin: SettingOrigin, value: unknown): string {
  if (value === undefined) return origin === "default" ? `(${s.defaultText.replace(/`/g, "")})` : "(none)";
  if (Array.isArray(value) && value.length === 0) return "(none)";
  if (s.show && !s.secret) return s.show(value);
  if (typeof value === "string") return value;
  if (Array.isArray(value) && value.every((v) => typeof v !== "object")) return value.join(",");
  return JSON.stringify(value);
}

const check: Command = {
  words: ["config", "check"],
  positionals: { min: 0, max: 0 },
  summary: "Validate the configuration as the agent does; print each effective value and its source.",
  details: [
    "Sources: environment (HOSTKEEPER_*) over the config file (HOSTKEEPER_CONFIG, default",
    "/etc/hostkeeper/config.json when present) over the default. Secrets (the token, the webhook secret,",
    "the operator's environment) are masked. Needs no running agent.",
    "An invalid configuration is refused with the agent's own message and exit code 2, as `serve` does.",
    "Says which of Caddy's settings outside the routes the agent writes at start: all on its embedded Caddy,",
    "on a Caddy of your own (HOSTKEEPER_CADDY_ADMIN) only those a setting set here asks for.",
    "Lists the hooks each stage runs, and names each hook the agent refuses or leaves out, and why.",
  ],
  run: async (inv) => {
    const { config, source } = loadAgentConfig();
    const file = configFilePath(source.env) ?? null;
    const rows: { env: string; key: string; source: string; value: unknown; shown: string }[] = [];
    for (const [group, settings] of Object.entries(settingGroups)) {
      const values = (config as unknown as Record<string, Record<string, unknown>>)[group] ?? {};
      for (const [name, s] of Object.entries(settings as Record<string, Setting<unknown>>)) {
        const value = s.secret ? masked(values[name]) : values[name];
        const { origin } = settingInput(s, source);
        rows.push({ env: s.env, key: s.key, source: origin, value, shown: shown(s, origin, value) });
      }
    }
    const caddy = settingsAtStart(
      agentCaddyFields(config.proxy),
      { ownCaddy: config.proxy.caddyAdmin !== undefined, explicit: config.explicit },
      settingEnv,
    );
    const hooks = allStageHooks(config.system.hooksDir);
    if (inv.json) {
      print(
        JSON.stringify({
          valid: true,
          config_file: file,
          caddy_settings_applied: caddy.applied ?? "all",
          hooks: { dir: config.system.hooksDir, stages: hooks },
          settings: rows.map(({ env, key, source, value }) => ({ env, key, source, value: value ?? null })),
        }),
      );
      return 0;
    }
    print(`configuration is valid; config file: ${file ?? "none"}`);
    print(
      table(
        ["SETTING", "SOURCE", "VALUE"],
        rows.map((r) => [r.env, r.source, r.shown]),
      ),
    );
    print(`\nHooks in ${config.system.hooksDir}: ${hooksLine(hooks)}.`);
    for (const warning of hookWarnings(hooks)) print(`warning: ${warning}`);
    print(`\nAt start, ${caddy.text}.`);
    return 0;
  },
};

export const configCommands: Command[] = [check];
