import { agentToken, loadAgentConfig } from "./agent.js";
import type { Command } from "./args.js";
import { print } from "./output.js";

const tokenShow: Command = {
  words: ["token", "show"],
  positionals: { min: 0, max: 0 },
  summary: "Print the agent's API token (HOSTKEEPER_TOKEN, else <data dir>/token).",
  details: [
    "The token file is readable by root only: run this as root. Nothing is created when it is missing.",
    'With --json: {"token": ..., "source": HOSTKEEPER_TOKEN | config file | <path>}.',
  ],
  run: async (inv) => {
    const { config, source } = loadAgentConfig();
    const token = agentToken(config, source);
    print(inv.json ? JSON.stringify({ token: token.value, source: token.from }) : token.value);
    return 0;
  },
};

export const tokenCommands: Command[] = [tokenShow];
