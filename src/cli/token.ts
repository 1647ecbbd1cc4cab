import { agentToken, connect, loadAgentConfig } from "./agent.js";
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

const tokenRotate: Command = {
  words: ["token", "rotate"],
  positionals: { min: 0, max: 1 },
  summary: "Issue a new secret for a token (default: the agent's own) and print it once.",
  details: [
    "NAME is a token of HOSTKEEPER_TOKENS_FILE, or `default` (the agent's own token in <data dir>/token).",
    "The agent writes the new secret's hash (the token file itself for `default`) and keeps the old secret",
    "valid for HOSTKEEPER_TOKEN_ROTATION_OVERLAP_SECONDS, so clients can change over; the secret is printed",
    "only now. A HOSTKEEPER_TOKEN set in the configuration cannot be rotated: change it there.",
    'With --json: {"name": ..., "token": ..., "previous_valid_until": ...}.',
  ],
  timeoutSeconds: 30,
  run: async (inv) => {
    const name = inv.positionals[0] ?? "default";
    const answer = await connect(inv.timeoutMs).call("POST", `/v1/tokens/${encodeURIComponent(name)}/rotate`);
    if (inv.json) print(answer.text);
    else {
      const r = JSON.parse(answer.text) as { token: string; previous_valid_until: string };
      print(r.token);
      process.stderr.write(`the old secret of ${name} stays valid until ${r.previous_valid_until}\n`);
    }
    return 0;
  },
};

export const tokenCommands: Command[] = [tokenShow, tokenRotate];
