import type { Logger } from "pino";
import { AuditLog } from "../access/audit-store.js";
import { TokenRegistry } from "../access/tokens.js";
import { AccessControl } from "../http/auth.js";
import { FailureLimiter } from "../http/rate-limit.js";
import type { AppConfig } from "../settings.js";
import type { Db } from "../store/db.js";
import { generateToken, loadOrCreateSecret } from "../store/secrets.js";

/** Who may call the agent: its tokens, the check of each request, and the audit trail of what they did. */
export interface Access {
  tokens: TokenRegistry;
  access: AccessControl;
  audit: AuditLog;
}

/**
 * The agent's own token (configured, else read from or generated into the data dir), the tokens file, the
 * limiter of failed authentications, and the audit trail, whose records still pending were left by an
 * agent that stopped mid-request.
 */
export function buildAccess(config: AppConfig, db: Db, logger: Logger, now: () => number): Access {
  const { agent, access: settings } = config;
  const token = agent.token ?? loadOrCreateSecret(agent.dataDir, "token", generateToken);
  if (typeof token !== "string" && token.created)
    logger.info({ path: token.path }, "generated an API token; read it from this file");
  const tokens = new TokenRegistry({
    own:
      typeof token === "string"
        ? { secret: token, path: undefined }
        : { secret: token.value, path: token.path },
    tokensFile: settings.tokensFile,
    overlapMs: settings.tokenRotationOverlapSeconds * 1000,
    now,
    log: logger.child({ component: "tokens" }),
  });
  const access = new AccessControl(
    tokens,
    new FailureLimiter({ burst: settings.authFailureBurst, perMinute: settings.authFailuresPerMinute, now }),
    logger.child({ component: "auth" }),
  );
  const audit = new AuditLog(db, now);
  const interrupted = audit.markInterrupted();
  if (interrupted > 0)
    logger.warn(
      { records: interrupted },
      "audit records of requests the agent stopped during marked interrupted",
    );
  return { tokens, access, audit };
}
