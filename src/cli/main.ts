#!/usr/bin/env node
import { ConfigError } from "../config.js";
import { packageVersion } from "../paths.js";
import { ApiProblem } from "./agent.js";
import { agentUpdateCommands } from "./agent-update.js";
import { type Command, commandHelp, parseInvocation, UsageError, usageLine, wantsHelp } from "./args.js";
import { certsCommands } from "./certs.js";
import { configCommands } from "./config.js";
import { connectCommands } from "./connect.js";
import { operatorCommands } from "./operator.js";
import { print } from "./output.js";
import { routesCommands } from "./routes.js";
import { scheduleCommands } from "./schedule.js";
import { statusCommands } from "./status.js";
import { tokenCommands } from "./token.js";
import { updatesCommands } from "./updates.js";

const serve: Command = {
  words: ["serve"],
  positionals: { min: 0, max: 0 },
  summary: "Run the agent in the foreground (what hostkeeper.service and `npm start` start).",
  details: [
    "Configuration: environment, then the config file, then the defaults (`hostkeeper config check`).",
    "SIGTERM or SIGINT stops it after its in-flight requests; Caddy and operator instances keep running.",
  ],
  json: false,
  run: async () => {
    // Loaded here, so the other commands start without the agent's code.
    const { serve } = await import("../server.js");
    await serve();
    return undefined;
  },
};

const commands: Command[] = [
  serve,
  ...statusCommands,
  ...routesCommands,
  ...certsCommands,
  ...updatesCommands,
  ...scheduleCommands,
  ...operatorCommands,
  ...agentUpdateCommands,
  ...configCommands,
  ...tokenCommands,
  ...connectCommands,
];

const groups: Record<string, string> = {
  routes: "Reverse-proxy routes in Caddy, through the agent's API, and their access logs.",
  certs: "The certificates Caddy serves for the routes' hosts, and custom certificates.",
  updates: "System package updates: check, apply and follow an apply, and the history of applies.",
  schedule: "The maintenance schedule: the windows the agent applies updates in on its own.",
  operator: "The operator's running instance and its updates.",
  agent: "The agent itself: update it to another version.",
  config: "The agent's configuration.",
  token: "The agent's API tokens: show the agent's own, rotate one.",
  connect: "The agent's key pair for its outbound connection: show its public key.",
};

const TOP_USAGE = "usage: hostkeeper <command> [<args>] [options]   (hostkeeper --help lists the commands)";

function topHelp(): string {
  const names = commands.map((c) => [c.words.join(" "), c.summary] as const);
  const width = Math.max(...names.map(([n]) => n.length));
  return [
    "usage: hostkeeper <command> [<args>] [options]",
    "",
    "Hostkeeper, the host-management agent (serve), and a client of the local agent's API.",
    "",
    "commands:",
    ...names.map(([n, s]) => `  ${n.padEnd(width)}  ${s}`),
    "",
    "options:",
    "  --version   Print the version and exit.",
    "  -h, --help  Show this help and exit; every command takes --help too.",
    "",
    "Every command but serve takes --json (the API's JSON as it came) and those that call the agent --timeout.",
    "The agent is found, and its token read, the way the agent itself reads its configuration.",
    "Exit codes: 0 success; 1 failure (a problem from the agent, the agent not reachable, the token",
    "not readable); 2 usage error or invalid configuration; 130 following an apply or an agent update",
    "stopped by Ctrl-C.",
    "",
  ].join("\n");
}

function groupUsage(group: string): string {
  const subs = commands.filter((c) => c.words[0] === group).map((c) => c.words[1]);
  return `usage: hostkeeper ${group} ${subs.join("|")} [<args>] [options]`;
}

function groupHelp(group: string): string {
  const subs = commands.filter((c) => c.words[0] === group);
  const names = subs.map((c) => usageLine(c).replace(/^usage: /, ""));
  const width = Math.max(...names.map((n) => n.length));
  return [
    groupUsage(group),
    "",
    groups[group] ?? "",
    "",
    ...subs.map((c, i) => `  ${(names[i] as string).padEnd(width)}  ${c.summary}`),
    "",
    `hostkeeper ${group} <command> --help describes each.`,
    "",
  ].join("\n");
}

/** Finds the command the words name; the rest of the words are its arguments. */
function select(argv: readonly string[]): { command: Command; args: string[] } | { help: string } {
  const [first, ...rest] = argv;
  if (first === undefined) throw new UsageError("missing command", TOP_USAGE);
  if (["--help", "-h", "--version"].includes(first))
    throw new UsageError(`${first} takes no arguments`, TOP_USAGE);
  if (first.startsWith("-")) throw new UsageError(`unknown option ${first}`, TOP_USAGE);
  const single = commands.find((c) => c.words.length === 1 && c.words[0] === first);
  if (single) return { command: single, args: rest };
  if (!(first in groups)) throw new UsageError(`unknown command "${first}"`, TOP_USAGE);
  const [second, ...args] = rest;
  if (second === "--help" || second === "-h") return { help: groupHelp(first) };
  if (second === undefined) throw new UsageError(`missing ${first} command`, groupUsage(first));
  const command = commands.find((c) => c.words[0] === first && c.words[1] === second);
  if (!command) throw new UsageError(`unknown ${first} command "${second}"`, groupUsage(first));
  return { command, args };
}

async function main(argv: readonly string[]): Promise<number | undefined> {
  if (argv.length === 1 && (argv[0] === "--help" || argv[0] === "-h")) {
    print(topHelp());
    return 0;
  }
  if (argv.length === 1 && argv[0] === "--version") {
    print(`hostkeeper ${packageVersion()}`);
    return 0;
  }
  const selected = select(argv);
  if ("help" in selected) {
    print(selected.help);
    return 0;
  }
  const { command, args } = selected;
  if (wantsHelp(args)) {
    print(commandHelp(command));
    return 0;
  }
  const inv = parseInvocation(command, args);
  try {
    return await command.run(inv);
  } catch (err) {
    if (err instanceof ApiProblem && inv.json) print(err.text);
    throw err;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code !== undefined) process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof UsageError) {
      process.stderr.write(`hostkeeper: ${err.message}\n${err.usage}\n`);
      process.exit(2);
    }
    // The agent's own rule: an invalid configuration stops it with exit code 2; every command follows it.
    if (err instanceof ConfigError) {
      process.stderr.write(`hostkeeper: ${err.message}\n`);
      process.exit(2);
    }
    // A CliFailure is already one line for people; anything else is said by its message alone, as the agent does.
    process.stderr.write(`hostkeeper: ${(err as Error).message}\n`);
    process.exit(1);
  },
);
