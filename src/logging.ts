import pino, { type Logger, type LoggerOptions } from "pino";

export type LogFormat = "auto" | "json" | "pretty";

/** What the agent's log hides wherever it appears in a line. */
export const redactPaths = ["req.headers.authorization", "token", "secret"];

/** `auto` is pretty for a person at a terminal, JSON for everything else (journald, pipes, files). */
export function resolveLogFormat(format: LogFormat, isTty: boolean | undefined): "json" | "pretty" {
  if (format !== "auto") return format;
  return isTty ? "pretty" : "json";
}

/**
 * The agent's logger: ISO 8601 times in both formats, so a line reads the same to a person and a machine.
 * pino-pretty is loaded only when the pretty format is used, and writes synchronously so that the lines
 * of an agent that exits (a failed start, the end of a shutdown) are not lost in a buffer.
 */
export async function createLogger(opts: {
  level: string;
  format: LogFormat;
  isTty?: boolean;
}): Promise<Logger> {
  const options: LoggerOptions = {
    level: opts.level,
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: redactPaths, censor: "[redacted]" },
  };
  if (resolveLogFormat(opts.format, opts.isTty ?? process.stdout.isTTY) === "json") return pino(options);
  const { default: pretty } = await import("pino-pretty");
  return pino(
    options,
    pretty({ sync: true, translateTime: false, colorize: opts.isTty ?? process.stdout.isTTY ?? false }),
  );
}
