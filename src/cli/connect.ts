import { readIdentity } from "../connect/identity.js";
import { CliFailure, loadAgentConfig } from "./agent.js";
import type { Command } from "./args.js";
import { fields, print } from "./output.js";

const connectShow: Command = {
  words: ["connect", "show"],
  positionals: { min: 0, max: 0 },
  summary: "Print the agent's public key and its fingerprint (<data dir>/connect-key holds the private key).",
  details: [
    "The key pair is made by the agent at its first start; this reads it (as root) and creates nothing.",
    "The private key is never printed. `GET /v1/status` gives the same under `connect`.",
    'With --json: {"public_key": ..., "fingerprint": ..., "key_file": <path>}.',
  ],
  run: async (inv) => {
    const { config } = loadAgentConfig();
    const { identity, path } = readIdentity(config.agent.dataDir);
    if (identity === undefined)
      throw new CliFailure(`${path} does not exist yet: the agent makes its key pair at its first start`);
    const shown = { public_key: identity.publicKey, fingerprint: identity.fingerprint, key_file: path };
    print(
      inv.json
        ? JSON.stringify(shown)
        : fields(Object.entries(shown).map(([k, v]) => [k.replace("_", " "), v])),
    );
    return 0;
  },
};

export const connectCommands: Command[] = [connectShow];
