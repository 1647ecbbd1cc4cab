import { parse, setting } from "../config.js";
import { sourceProblem } from "../operator/artifacts/source.js";
import { minisignKeyList } from "../operator/settings.js";

/**
 * The agent's self-update. Packages are fetched with the operator's download settings (HTTP rule, CA file,
 * object storage, time-outs, retries: one artifact transport per host), and verified with keys of their own.
 */
export const agentUpdateSettings = {
  keys: setting({
    key: "agentUpdateKeys",
    env: "HOSTKEEPER_AGENT_UPDATE_KEYS",
    area: "agent",
    doc: "minisign public keys the agent's own packages must be signed with (the base64 line of a `minisign.pub`; commas, spaces or newlines between several; a list in the config file). Without one, self-update is refused (docs/install.md, Self-update).",
    defaultText: "none (self-update refused)",
    default: [] as string[],
    ...minisignKeyList,
  }),
  source: setting({
    key: "agentUpdateSource",
    env: "HOSTKEEPER_AGENT_UPDATE_SOURCE",
    area: "agent",
    doc: "Where the agent's releases are, for a request that names a version without `artifact_source`, and where the running version's package is fetched when none is kept for a rollback: an `https://` prefix or `s3://bucket/prefix` holding `<version>/<package>`.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw);
      if (s === undefined) return undefined;
      // http is allowed here only as far as HOSTKEEPER_OPERATOR_ALLOW_HTTP allows it, checked per request.
      const problem = sourceProblem(s, true);
      if (problem) throw new Error(problem);
      return s.replace(/\/+$/, "");
    },
  }),
  timeoutS: setting({
    key: "agentUpdateTimeoutS",
    env: "HOSTKEEPER_AGENT_UPDATE_TIMEOUT_S",
    area: "agent",
    doc: "How long the new agent has, after its package is installed, to answer ready with the new version; past it, the previous package is installed again and the update is `rolled_back`.",
    defaultText: "120",
    default: 120,
    parse: parse.int(5, 3600),
  }),
};
