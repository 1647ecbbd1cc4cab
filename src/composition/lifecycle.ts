import type { Logger } from "pino";
import type { ConnectClient } from "../connect/client.js";
import type { App } from "../http/types.js";
import type { AppConfig } from "../settings.js";
import type { Db } from "../store/db.js";
import { Periodic } from "../util/periodic.js";
import { settledWithin } from "../util/timers.js";
import type { Access } from "./access.js";
import type { Areas } from "./areas.js";

/**
 * What starts once the app is ready and stops when it closes, in order: Caddy brought in line with the
 * connection settings, the boot recorded, tokens watched, the audit trail pruned hourly, callbacks sent,
 * maintenance windows run, the operator's instances adopted; at close the reverse, the database last.
 */
export function manageLifecycle(
  app: App,
  config: AppConfig,
  db: Db,
  { tokens, audit }: Access,
  areas: Areas,
  connection: ConnectClient | undefined,
  logger: Logger,
): void {
  const retentionMs = config.access.auditRetentionDays * 86_400_000;
  const pruneAudit = new Periodic({
    intervalMs: 3_600_000,
    round: () => {
      const pruned = audit.prune(retentionMs);
      if (pruned > 0) logger.info({ records: pruned }, "pruned audit records past their retention");
    },
    what: "pruning the audit trail",
    log: logger,
  });

  app.addHook("onReady", async () => {
    // In the writer's queue, ahead of any change, without holding up the start on a slow or absent Caddy.
    void areas.routes.conformCaddy();
    // Ahead of any change of the custom certificates, which wait for it.
    void areas.certificates.conform();
    // Behind it: the access logs brought in line with the routes (a Caddy restarted or adopted), stale
    // files removed, and again hourly.
    areas.accessLogs.start();
    await areas.system.start();
    tokens.start();
    pruneAudit.start();
    void pruneAudit.runNow();
    areas.outbox.start();
    areas.schedule.start();
    areas.operator.start();
    // Without a listener there is no onListen: the agent's own update is watched from here.
    if (config.agent.listen === "off") startAgentUpdate();
    // Last: the control plane's requests find every part started. Events waiting for it go at each connection.
    connection?.start(() => areas.outbox.connectionRestored());
  });
  // The control plane's requests stop first: a request run during the close would meet closed parts.
  app.addHook("preClose", async () => {
    await connection?.close();
  });
  // Once the API listens: an agent started by its own update says it is ready only when it answers.
  const startAgentUpdate = () =>
    areas.agentUpdate.start(async () => (await areas.health.readiness()).status === "ready");
  app.addHook("onListen", async () => startAgentUpdate());
  app.addHook("onClose", async () => {
    tokens.close();
    await pruneAudit.stop();
    await areas.operator.close();
    await areas.agentUpdate.close();
    areas.accessLogs.close();
    await areas.onDemandAsk.close();
    areas.schedule.close();
    // A change's records are finished after its answer; let the writer get there before the database closes.
    await settledWithin(areas.writer.whenIdle(), 5000);
    await areas.outbox.close();
    await areas.system.close();
    audit.flush();
    db.close();
  });
}
