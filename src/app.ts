import { SerializerSelector } from "@fastify/fast-json-stringify-compiler";
import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import Fastify, { type FastifyBaseLogger, type FastifyServerFactory } from "fastify";
import type { Logger } from "pino";
import { CaddyAdmin } from "./caddy/admin.js";
import { DenyList } from "./events/egress.js";
import { Outbox } from "./events/outbox.js";
import { registerEventRoutes } from "./events/routes.js";
import { outboxMigrations } from "./events/store.js";
import { registerHealthRoutes } from "./health/routes.js";
import { HealthService, type SupervisedCaddy } from "./health/service.js";
import { registerAccessRoutes } from "./http/access-routes.js";
import { auditMutations } from "./http/audit.js";
import { AccessControl, registerAccessControl, requireRouteScopes } from "./http/auth.js";
import { limitRequestBodies } from "./http/body-limit.js";
import {
  answerExpectations,
  httpEdgeOptions,
  MAX_PARAM_LENGTH,
  type RegisteredRoute,
  RouteTable,
  registerProblemHandlers,
  trackRoutes,
} from "./http/edge.js";
import { registerOpenApi } from "./http/openapi.js";
import { FailureLimiter } from "./http/rate-limit.js";
import { echoRequestId, genReqId } from "./http/request-id.js";
import { TokenRegistry } from "./http/tokens.js";
import type { App } from "./http/types.js";
import { Metrics } from "./metrics/metrics.js";
import { registerMetricsRoutes } from "./metrics/routes.js";
import { operatorProblem } from "./operator/problems.js";
import { registerOperatorRoutes } from "./operator/routes.js";
import { operatorSharedSchemas } from "./operator/schemas.js";
import { OperatorService } from "./operator/service.js";
import { operatorMigrations } from "./operator/store.js";
import { ChangeJournal, type RecordedChange } from "./proxy/journal.js";
import { proxyProblem } from "./proxy/problems.js";
import { registerProxyRoutes } from "./proxy/routes.js";
import { proxySharedSchemas } from "./proxy/schemas.js";
import { RouteService } from "./proxy/service.js";
import { proxyMigrations, RouteChangeStore } from "./proxy/store.js";
import { caddyDuration } from "./proxy/streams.js";
import { RouteWriter } from "./proxy/writer.js";
import type { AppConfig } from "./settings.js";
import { AuditLog, auditMigrations } from "./store/audit.js";
import { type Db, openDatabase } from "./store/db.js";
import { generateToken, generateWebhookSecret, loadOrCreateSecret } from "./store/secrets.js";
import { systemMigrations } from "./system/migrations.js";
import { systemProblem } from "./system/problems.js";
import { registerSystemRoutes } from "./system/routes.js";
import { createPackageManager } from "./system/select.js";
import { SystemService } from "./system/service.js";
import { settledWithin } from "./util/timers.js";

const buildSerializer = SerializerSelector();

/**
 * Response serializers are compiled on first use rather than at start: every route declares a body for
 * each of its problem statuses, and compiling all of them up front costs megabytes of resident memory an
 * idle agent never uses. Request validators stay eager, so a broken request schema still fails the start.
 */
const lazySerializers: typeof buildSerializer = (externalSchemas, options) => {
  const compile = buildSerializer(externalSchemas, options);
  return (route) => {
    let serialize: ((data: unknown) => string) | undefined;
    return (data: unknown) => {
      serialize ??= compile(route);
      return serialize(data);
    };
  };
};

export interface AppOptions {
  config: AppConfig;
  /** pino logger to use; tests pass a silent one. */
  logger: Logger;
  /** The agent's own Caddy, started and supervised by server.ts; undefined with HOSTKEEPER_CADDY_ADMIN. */
  embeddedCaddy?: SupervisedCaddy;
  /** The clock of token expiry, rate limits and the audit trail; tests pass one they control. */
  now?: () => number;
  /** Makes the HTTP(S) server (server.ts: TLS and allowed addresses); default Fastify's own HTTP server. */
  serverFactory?: FastifyServerFactory;
}

declare module "fastify" {
  interface FastifyInstance {
    services: {
      db: Db;
      outbox: Outbox;
      routes: RouteService;
      writer: RouteWriter<RecordedChange>;
      /** The client of Caddy's admin API every part of the agent shares (tests spy on its writes). */
      caddyAdmin: CaddyAdmin;
      operator: OperatorService;
      metrics: Metrics;
      tokens: TokenRegistry;
      audit: AuditLog;
    };
    /** Every route the app serves, as registered (tests walk it). */
    registeredRoutes: () => readonly RegisteredRoute[];
  }
}

/**
 * Builds the agent: the one composition root, where every area gets its adapters and shared mechanisms.
 * It does not listen (server.ts does), so tests build it and listen on port 0 or inject.
 * `config.proxy.caddyAdmin` must be resolved by now (server.ts starts the embedded Caddy first).
 */
export async function buildApp({
  config,
  logger,
  embeddedCaddy,
  now = Date.now,
  serverFactory,
}: AppOptions): Promise<App> {
  const { agent, access: accessConfig, events, proxy, system } = config;
  const caddyAddress = proxy.caddyAdmin;
  if (!caddyAddress) throw new Error("buildApp needs a Caddy admin address (start the embedded Caddy first)");

  const db = openDatabase(agent.dataDir, [
    ...outboxMigrations,
    ...proxyMigrations,
    ...systemMigrations,
    ...operatorMigrations,
    ...auditMigrations,
  ]);
  const token = agent.token ?? loadOrCreateSecret(agent.dataDir, "token", generateToken);
  if (typeof token !== "string" && token.created)
    logger.info({ path: token.path }, "generated an API token; read it from this file");
  const secret =
    events.webhookSecret ?? loadOrCreateSecret(agent.dataDir, "webhook-secret", generateWebhookSecret).value;

  const tokens = new TokenRegistry({
    own:
      typeof token === "string"
        ? { secret: token, path: undefined }
        : { secret: token.value, path: token.path },
    tokensFile: accessConfig.tokensFile,
    overlapMs: accessConfig.tokenRotationOverlapSeconds * 1000,
    now,
    log: logger.child({ component: "tokens" }),
  });
  const access = new AccessControl(
    tokens,
    new FailureLimiter({
      burst: accessConfig.authFailureBurst,
      perMinute: accessConfig.authFailuresPerMinute,
      now,
    }),
    logger.child({ component: "auth" }),
  );
  const check = access.check;
  const audit = new AuditLog(db, now);
  // Nothing is in flight yet: a record still pending was left by an agent that stopped mid-request.
  const interrupted = audit.markInterrupted();
  if (interrupted > 0)
    logger.warn(
      { records: interrupted },
      "audit records of requests the agent stopped during marked interrupted",
    );
  const app = Fastify({
    ...httpEdgeOptions(check),
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    // Node would answer a missing Host itself, in plain text; the edge's hook answers it as a problem.
    http: { requireHostHeader: false },
    ...(serverFactory ? { serverFactory } : {}),
    loggerInstance: logger as FastifyBaseLogger,
    genReqId,
    bodyLimit: agent.bodyLimit,
    requestTimeout: agent.requestTimeoutMs,
    return503OnClosing: true,
    schemaController: { compilersFactory: { buildSerializer: lazySerializers } },
    ajv: {
      customOptions: { removeAdditional: false, coerceTypes: false, allErrors: true, useDefaults: false },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  const metrics = new Metrics();
  const deny = new DenyList(events.webhookDenyCidrs);
  const outbox = new Outbox(db, {
    metrics,
    secret,
    deny,
    timeoutMs: events.webhookTimeoutMs,
    retryScheduleSeconds: events.webhookRetrySchedule,
    log: logger.child({ component: "outbox" }),
  });
  metrics.readOutboxStates(() => outbox.countByState());
  const admin = new CaddyAdmin(caddyAddress, proxy.caddyTimeoutMs, metrics);
  const changes = new RouteChangeStore(db);
  const journal = new ChangeJournal({
    store: changes,
    outbox,
    firstAttemptTimeoutMs: events.webhookFirstAttemptTimeoutMs,
  });
  const writer = new RouteWriter<RecordedChange>(admin, {
    journal,
    metrics,
    server: proxy.caddyServer,
    listen: proxy.caddyListen,
    ...(proxy.caddyGracePeriodMs > 0
      ? { httpApp: { grace_period: caddyDuration(proxy.caddyGracePeriodMs) } }
      : {}),
    log: logger.child({ component: "route-writer" }),
  });
  const routes = new RouteService({
    metrics,
    writer,
    journal,
    store: changes,
    operatorRouteId: proxy.operatorDomain,
    connections: {
      streamCloseDelayMs: proxy.caddyStreamCloseDelayMs,
      gracePeriodMs: proxy.caddyGracePeriodMs,
    },
    log: logger.child({ component: "routes" }),
  });
  const systemLog = logger.child({ component: "system" });
  const systemService = new SystemService({
    db,
    metrics,
    manager: createPackageManager(system, process.env, systemLog),
    lockTimeoutMs: system.lockTimeoutMs,
    rebootCommand: system.rebootCommand,
    rebootDelayMs: system.rebootDelayMs,
    boot: { bootIdFile: system.bootIdFile, kernelReleaseFile: system.kernelReleaseFile },
    outbox,
    env: process.env,
    log: systemLog,
  });
  const operator = new OperatorService({
    db,
    metrics,
    outbox,
    routes,
    config: config.operator,
    dataDir: agent.dataDir,
    log: logger.child({ component: "operator" }),
  });
  metrics.readCaddyRestarts(() => embeddedCaddy?.status().restarts ?? 0);
  const health = new HealthService({
    db,
    caddyAdmin: caddyAddress,
    server: proxy.caddyServer,
    embedded: embeddedCaddy,
    system: systemService,
    operator,
    outbox,
  });
  app.decorate("services", {
    db,
    outbox,
    routes,
    writer,
    caddyAdmin: admin,
    operator,
    metrics,
    tokens,
    audit,
  });

  // JSON is the only body the API takes; anything else is 415 rather than a string failing validation.
  app.removeContentTypeParser("text/plain");
  const table = new RouteTable();
  requireRouteScopes(app);
  trackRoutes(app, table);
  app.decorate("registeredRoutes", () => table.routes());
  // The first hooks of the root scope: the request's id is echoed, a request without Host is refused as
  // unreadable, then the token is checked before anything else runs, for every route.
  echoRequestId(app);
  registerProblemHandlers(app, table, [systemProblem, proxyProblem, operatorProblem]);
  answerExpectations(app, check);
  limitRequestBodies(app);
  registerAccessControl(app, access, auditMutations(app, audit, now));
  await registerOpenApi(app);
  for (const s of [...proxySharedSchemas, ...operatorSharedSchemas]) app.addSchema(s);

  registerHealthRoutes(app, health);
  // Any valid token may read the document: it says what exists, not what the token may do with it.
  app.get("/v1/openapi.json", { schema: { hide: true }, config: { scopes: [] } }, async () => app.swagger());
  registerProxyRoutes(app, routes, deny);
  registerSystemRoutes(app, systemService, deny);
  registerOperatorRoutes(app, operator, deny);
  registerEventRoutes(app, outbox);
  registerMetricsRoutes(app, metrics);
  registerAccessRoutes(app, audit, tokens);

  const retentionMs = accessConfig.auditRetentionDays * 86_400_000;
  const pruneAudit = () => {
    const pruned = audit.prune(retentionMs);
    if (pruned > 0) logger.info({ records: pruned }, "pruned audit records past their retention");
  };
  let pruneTimer: NodeJS.Timeout | undefined;

  app.addHook("onReady", async () => {
    // In the writer's queue, ahead of any change, without holding up the start on a slow or absent Caddy.
    void routes.conformCaddy();
    await systemService.start();
    tokens.start();
    pruneAudit();
    pruneTimer = setInterval(pruneAudit, 3_600_000);
    pruneTimer.unref();
    outbox.start();
    operator.start();
  });
  app.addHook("onClose", async () => {
    tokens.close();
    clearInterval(pruneTimer);
    await operator.close();
    // A change's records are finished after its answer; let the writer get there before the database closes.
    await settledWithin(writer.whenIdle(), 5000);
    await outbox.close();
    await systemService.close();
    db.close();
  });
  return app;
}
