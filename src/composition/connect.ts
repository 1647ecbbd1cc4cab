import type { Logger } from "pino";
import type { Grant } from "../access/scopes.js";
import type { ConnectClient } from "../connect/client.js";
import { type AgentIdentity, loadOrCreateIdentity } from "../connect/identity.js";
import type { App } from "../http/types.js";
import { packageVersion } from "../paths.js";
import type { AppConfig } from "../settings.js";
import type { Db } from "../store/db.js";
import { fs } from "../util/node-builtins.js";

/** The agent's key pair, and its connection to the control plane when HOSTKEEPER_CONNECT_URL is set. */
export interface Connection {
  identity: AgentIdentity;
  client: ConnectClient | undefined;
}

/**
 * The agent's key pair (connect/identity.ts), made at its first start, which says where it put it; and the
 * client of the control plane, which serves its requests through `app` once started (composition/lifecycle.ts).
 */
export async function buildConnection(
  config: AppConfig,
  app: App,
  db: Db,
  logger: Logger,
): Promise<Connection> {
  const { dataDir } = config.agent;
  const { identity, privateKey, created, path } = loadOrCreateIdentity(dataDir);
  if (created)
    logger.info(
      { path, fingerprint: identity.fingerprint },
      `made the agent's key pair; the private key is in ${path}`,
    );
  const c = config.connect;
  if (c.url === undefined) return { identity, client: undefined };
  // Loaded only when configured: the WebSocket library and TLS client cost an agent without a connection nothing.
  const { ConnectClient } = await import("../connect/client.js");
  const client = new ConnectClient({
    url: c.url,
    ca: c.ca === undefined ? undefined : readCa(c.ca),
    pinned: c.keys,
    enrollToken: c.enrollToken,
    scopes: c.scopes as Grant[],
    dataDir,
    identity,
    privateKey,
    agentVersion: packageVersion(),
    app,
    db,
    log: logger.child({ component: "connect" }),
    heartbeatMs: c.heartbeatS * 1000,
    deadAfterMs: c.heartbeatS * 3000,
  });
  return { identity, client };
}

function readCa(path: string): string {
  try {
    return fs.readFileSync(path, "utf8");
  } catch (err) {
    throw new Error(`cannot read HOSTKEEPER_CONNECT_CA ${path}: ${(err as Error).message}`);
  }
}
