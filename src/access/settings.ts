import { resolve } from "node:path";
import { parse, setting } from "../config.js";

/** Who may do what: named tokens with scopes, their rotation, the limit on failed attempts, the audit trail. */
export const accessSettings = {
  tokensFile: setting({
    key: "tokensFile",
    env: "HOSTKEEPER_TOKENS_FILE",
    area: "agent",
    doc: 'JSON file of named tokens with scopes, stored as SHA-256 hashes: `{"tokens": [{"name": "ci", "sha256": "<hex>", "scopes": ["proxy:read"]}]}` (see Security). Read again when it changes; a broken file keeps the tokens loaded before. They are accepted beside `HOSTKEEPER_TOKEN` (or the generated token), which holds every scope.',
    defaultText: "unset",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw);
      return s === undefined ? undefined : resolve(s);
    },
  }),
  tokenRotationOverlapSeconds: setting({
    key: "tokenRotationOverlapSeconds",
    env: "HOSTKEEPER_TOKEN_ROTATION_OVERLAP_SECONDS",
    area: "agent",
    doc: "How long a rotated token's old secret stays valid beside the new one (`hostkeeper token rotate`).",
    defaultText: "3600",
    default: 3600,
    parse: parse.int(0, 30 * 86_400),
  }),
  authFailureBurst: setting({
    key: "authFailureBurst",
    env: "HOSTKEEPER_AUTH_FAILURE_BURST",
    area: "agent",
    doc: "Failed authentications one source address may make in a row before further failures are answered 429.",
    defaultText: "10",
    default: 10,
    parse: parse.int(1, 100_000),
  }),
  authFailuresPerMinute: setting({
    key: "authFailuresPerMinute",
    env: "HOSTKEEPER_AUTH_FAILURES_PER_MINUTE",
    area: "agent",
    doc: "Rate at which a source address regains failed authentications after its burst is spent.",
    defaultText: "30",
    default: 30,
    parse: parse.int(1, 1_000_000),
  }),
  auditRetentionDays: setting({
    key: "auditRetentionDays",
    env: "HOSTKEEPER_AUDIT_RETENTION_DAYS",
    area: "agent",
    doc: "How long the audit trail (`GET /v1/audit`) keeps a record; older ones are pruned hourly.",
    defaultText: "90",
    default: 90,
    parse: parse.int(1, 36_500),
  }),
};
