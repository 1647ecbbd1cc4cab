import {
  agentSettings,
  type ConfigSource,
  checkUnknownFileKeys,
  eventSettings,
  readConfigFile,
  resolveSettings,
  type Setting,
} from "./config.js";
import { operatorSettings } from "./operator/settings.js";
import { proxySettings } from "./proxy/settings.js";
import { systemSettings } from "./system/settings.js";

/**
 * The composition of every area's settings. An area adds its group here; the README table and the
 * unknown-key check of the config file follow from this list.
 */
export const settingGroups = {
  agent: agentSettings,
  events: eventSettings,
  proxy: proxySettings,
  system: systemSettings,
  operator: operatorSettings,
};

type Groups = typeof settingGroups;
export type AppConfig = { [G in keyof Groups]: ReturnType<typeof resolveSettings<Groups[G]>> };

export function allSettings(): Setting<unknown>[] {
  return Object.values(settingGroups).flatMap((g) => Object.values(g) as Setting<unknown>[]);
}

export function loadConfig(source: ConfigSource): AppConfig {
  checkUnknownFileKeys(source.file, allSettings());
  const out: Record<string, unknown> = {};
  for (const [name, group] of Object.entries(settingGroups)) {
    out[name] = resolveSettings(group as Record<string, Setting<unknown>>, source);
  }
  return out as AppConfig;
}

export function loadConfigFromProcess(env: NodeJS.ProcessEnv = process.env): AppConfig {
  return loadConfig({ env, file: readConfigFile(env) });
}

/** The README's configuration table, one row per setting. */
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
