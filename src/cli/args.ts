/**
 * The CLI's commands and their arguments: a command declares its positionals and options once, and its
 * usage line, its `--help` and the refusal of anything else follow from that declaration.
 */

/** A usage error: the command line cannot be run as given (exit code 2). */
export class UsageError extends Error {
  constructor(
    message: string,
    /** The usage line to print under the message. */
    readonly usage: string,
  ) {
    super(message);
    this.name = "UsageError";
  }
}

export interface OptionSpec {
  /** Without the leading dashes: `strategy` for `--strategy`. */
  name: string;
  /** Placeholder of the option's value (`URL`); absent for a flag. */
  value?: string;
  doc: string;
  /** Checks and converts the value; throws an Error whose message completes "--name ...". */
  parse?: (raw: string) => string | number;
}

/** What a command gets: its positionals, its options by name (`true` for a flag), and `--json`. */
export interface Invocation {
  positionals: string[];
  options: Record<string, string | number | true | undefined>;
  json: boolean;
  /** The request time-out, for commands that talk to the agent. */
  timeoutMs: number;
}

export interface Command {
  /** The words that select it: `["routes", "add"]`. */
  words: readonly string[];
  /** Its positionals as the usage line shows them: `<domain> <upstream>...`. */
  args?: string;
  positionals: { min: number; max: number };
  summary: string;
  /** Further lines of `--help`, after the summary. */
  details?: readonly string[];
  options?: readonly OptionSpec[];
  /** Default time-out of its requests to the agent, in seconds; absent for commands that make none. */
  timeoutSeconds?: number;
  /** Whether it takes `--json`; every command but `serve` does. */
  json?: boolean;
  /** Runs it; resolves with the exit code, or undefined for `serve`, whose process goes on. */
  run(inv: Invocation): Promise<number | undefined>;
}

export const positiveInteger = (raw: string): number => {
  if (!/^[1-9]\d{0,8}$/.test(raw)) throw new Error(`must be a positive integer, got "${raw}"`);
  return Number(raw);
};

export const positiveSeconds = (raw: string): number => {
  const n = Number(raw);
  if (!/^\d+(\.\d+)?$/.test(raw) || !(n > 0 && n <= 86_400))
    throw new Error(`must be a number of seconds between 0 and 86400, got "${raw}"`);
  return n;
};

const HELP: OptionSpec = { name: "help", doc: "Show this help and exit." };
const JSON_OPTION: OptionSpec = {
  name: "json",
  doc: "Print the API's JSON as it came (a problem body too), for scripts.",
};

/** Every option a command takes, its own first, then the ones all commands of its kind share. */
export function optionsOf(c: Command): OptionSpec[] {
  const out = [...(c.options ?? [])];
  if (c.timeoutSeconds !== undefined)
    out.push({
      name: "timeout",
      value: "SECONDS",
      doc: `Give up on the agent after this long (default ${c.timeoutSeconds}).`,
      parse: positiveSeconds,
    });
  if (c.json !== false) out.push(JSON_OPTION);
  out.push(HELP);
  return out;
}

export function usageLine(c: Command): string {
  const opts = optionsOf(c).length > 1 ? " [options]" : "";
  return `usage: hostkeeper ${c.words.join(" ")}${c.args ? ` ${c.args}` : ""}${opts}`;
}

/** Whether the arguments ask for help (before any `--`), which then wins over everything else on the line. */
export function wantsHelp(argv: readonly string[]): boolean {
  for (const a of argv) {
    if (a === "--") return false;
    if (a === "--help" || a === "-h") return true;
  }
  return false;
}

/** Parses a command's arguments (the words that selected it removed); throws UsageError on anything else. */
export function parseInvocation(c: Command, argv: readonly string[]): Invocation {
  const specs = optionsOf(c);
  const usage = usageLine(c);
  const positionals: string[] = [];
  const options: Invocation["options"] = {};
  let onlyPositionals = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (onlyPositionals || a === "-" || !a.startsWith("-")) {
      positionals.push(a);
      continue;
    }
    if (a === "--") {
      onlyPositionals = true;
      continue;
    }
    const eq = a.indexOf("=");
    const name = a.startsWith("--") ? a.slice(2, eq === -1 ? undefined : eq) : "";
    const spec = specs.find((s) => s.name === name);
    if (!spec) throw new UsageError(`unknown option ${eq === -1 ? a : a.slice(0, eq)}`, usage);
    if (spec.value === undefined) {
      if (eq !== -1) throw new UsageError(`--${name} takes no value`, usage);
      options[name] = true;
      continue;
    }
    let raw: string | undefined;
    if (eq !== -1) raw = a.slice(eq + 1);
    else {
      raw = argv[i + 1];
      i++;
    }
    if (raw === undefined) throw new UsageError(`--${name} needs a value (${spec.value})`, usage);
    try {
      options[name] = spec.parse ? spec.parse(raw) : raw;
    } catch (err) {
      throw new UsageError(`--${name} ${(err as Error).message}`, usage);
    }
  }
  const { min, max } = c.positionals;
  if (positionals.length < min)
    throw new UsageError(`missing ${c.args ? `arguments: ${c.args}` : "arguments"}`, usage);
  if (positionals.length > max) {
    const extra = positionals[max] as string;
    throw new UsageError(`unexpected argument "${extra}"`, usage);
  }
  const timeout = options.timeout;
  return {
    positionals,
    options,
    json: options.json === true,
    timeoutMs: Math.round((typeof timeout === "number" ? timeout : (c.timeoutSeconds ?? 0)) * 1000),
  };
}

/** The `--help` text of one command. */
export function commandHelp(c: Command): string {
  const specs = optionsOf(c);
  const labels = specs.map(
    (s) => `${s.name === "help" ? "-h, " : ""}--${s.name}${s.value ? ` ${s.value}` : ""}`,
  );
  const width = Math.max(...labels.map((l) => l.length));
  return [
    usageLine(c),
    "",
    c.summary,
    ...(c.details?.length ? ["", ...c.details] : []),
    "",
    "options:",
    ...specs.map((s, i) => `  ${(labels[i] as string).padEnd(width)}  ${s.doc}`),
    "",
  ].join("\n");
}
