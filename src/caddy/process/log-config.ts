import type { Logger } from "pino";
import type { CaddyConfig } from "../config.js";
import { EmbeddedCaddyError } from "./errors.js";

/** Caddy's own log is rolled at this size (MiB), keeping this many rolled files. */
export interface CaddyLogRoll {
  sizeMb: number;
  keep: number;
}

/** The `logging.logs.default` Caddy gets: a file writer rolled at a size, a bounded number kept (gzipped). */
export function caddyLogConfig(path: string, roll: CaddyLogRoll): Record<string, unknown> {
  return {
    writer: {
      output: "file",
      filename: path,
      roll: true,
      roll_size_mb: roll.sizeMb,
      roll_keep: roll.keep,
    },
    // JSON with ISO 8601 times, as the agent's own log: one reader for both.
    encoder: { format: "json", time_format: "iso8601" },
  };
}

/**
 * Caddy's default log is the rolled file (its own config, so it holds for an adopted Caddy too): set when
 * the config Caddy runs (autosaved by an earlier agent, or adopted) has another one. A config change only
 * when it differs, as it reloads Caddy. Only its writer and encoder are this function's: what else the
 * default log holds stays (the access logs' `exclude`, which src/caddy/access-log-config.ts keeps).
 */
export async function prepareLogging(
  config: CaddyConfig,
  path: string,
  roll: CaddyLogRoll,
  log: Logger,
): Promise<void> {
  const wanted = caddyLogConfig(path, roll);
  try {
    const done = await config.update(
      ["logging", "logs", "default"],
      (current) => ({ ...(current as Record<string, unknown> | undefined), ...wanted }),
      { createConfig: true },
    );
    if (done.written) log.info({ log: path, roll }, "set the embedded Caddy's log");
  } catch (err) {
    throw new EmbeddedCaddyError(
      `the embedded Caddy refused its log configuration (${path}): ${(err as Error).message}`,
    );
  }
}
