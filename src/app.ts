import type { FastifyServerFactory } from "fastify";
import type { Logger } from "pino";
import { type AuditLog, auditMigrations } from "./access/audit-store.js";
import { auditMutations } from "./access/audit-trail.js";
import { accessProblem } from "./access/problems.js";
import { registerAccessRoutes } from "./access/routes.js";
import type { TokenRegistry } from "./access/tokens.js";
import { accessLogProblem } from "./access-logs/problems.js";
import { registerAccessLogRoutes } from "./access-logs/routes.js";
import type { AccessLogService } from "./access-logs/service.js";
import { agentUpdateProblem } from "./agent-update/problems.js";
import { registerAgentUpdateRoutes } from "./agent-update/routes.js";
import { agentUpdateSharedSchemas } from "./agent-update/schemas.js";
import { agentUpdateMigrations } from "./agent-update/store.js";
import { CaddyAdmin } from "./caddy/admin.js";
import { onDemandMigrations } from "./certificates/on-demand-store.js";
import { certificatesProblem } from "./certificates/problems.js";
import { registerCertificateRoutes } from "./certificates/routes.js";
import { certificatesSharedSchemas } from "./certificates/schemas.js";
import type { CertificateService } from "./certificates/service.js";
import { type Access, buildAccess } from "./composition/access.js";
import { type Areas, buildAreas } from "./composition/areas.js";
import { buildConnection } from "./composition/connect.js";
import { createFastify } from "./composition/fastify.js";
import { manageLifecycle } from "./composition/lifecycle.js";
import { connectMigrations } from "./connect/replay-store.js";
import type { Outbox } from "./events/outbox.js";
import { registerEventRoutes } from "./events/routes.js";
import { outboxMigrations } from "./events/store.js";
import { registerHealthRoutes } from "./health/routes.js";
import type { SupervisedCaddy } from "./health/service.js";
import { registerAccessControl, requireRouteScopes } from "./http/auth.js";
import { limitRequestBodies } from "./http/body-limit.js";
import {
  answerExpectations,
  type RegisteredRoute,
  RouteTable,
  registerProblemHandlers,
  trackRoutes,
} from "./http/edge.js";
import { registerOpenApiRoute } from "./http/openapi.js";
import { echoRequestId } from "./http/request-id.js";
import { ProblemSchema } from "./http/schemas.js";
import type { App } from "./http/types.js";
import type { Metrics } from "./metrics/metrics.js";
import { registerMetricsRoutes } from "./metrics/routes.js";
import { operatorProblem } from "./operator/problems.js";
import { registerOperatorRoutes } from "./operator/routes.js";
import { operatorSharedSchemas } from "./operator/schemas.js";
import type { OperatorService } from "./operator/service.js";
import { operatorMigrations } from "./operator/store.js";
import { proxyProblem } from "./proxy/problems.js";
import { hideSecretsFromReaders } from "./proxy/redaction-routes.js";
import { registerProxyRoutes } from "./proxy/routes.js";
import { proxySharedSchemas } from "./proxy/schemas.js";
import type { RouteService } from "./proxy/service.js";
import { proxyMigrations } from "./proxy/store.js";
import type { RouteWriter } from "./proxy/writer.js";
import type { AppConfig } from "./settings.js";
import { type Db, openDatabase } from "./store/db.js";
import { systemMigrations } from "./system/migrations.js";
import { systemProblem } from "./system/problems.js";
import { registerSystemRoutes } from "./system/routes.js";
import { postponeIdleCollection } from "./util/idle-gc.js";

export interface AppOptions {
  config: AppConfig;
  /** pino logger to use; tests pass a silent one. */
  logger: Logger;
  /** The agent's own Caddy, started and supervised by server.ts; undefined with HOSTKEEPER_CADDY_ADMIN. */
  embeddedCaddy?: SupervisedCaddy;
  /**
   * The process's one client of Caddy's admin API, on `config.proxy.caddyAdmin` (server.ts builds it to
   * start the embedded Caddy); built here when not given (tests).
   */
  caddyAdmin?: CaddyAdmin;
  /**
   * The clock of token expiry, rate limits, the audit trail and maintenance windows; tests pass one they
   * control (production reads the host's).
   */
  now?: () => number;
  /** Makes the HTTP(S) server (server.ts: TLS and allowed addresses); default Fastify's own HTTP server. */
  serverFactory?: FastifyServerFactory;
  /**
   * Registers an OpenAPI generator before any route and gives its document, which `GET /v1/openapi.json`
   * then serves instead of the committed file (scripts/openapi-doc.ts passes @fastify/swagger's).
   */
  openApiGenerator?: (app: App) => Promise<() => unknown>;
  /**
   * Reads Caddy's routes for every change and read (`CaddyRoutes`) instead of keeping what was learnt
   * between them (`CachedRoutes`): the routes tests run on both (TEST_ROUTES_BACKEND=plain) to show that
   * what the cached one keeps changes no answer. Not a setting: the agent always runs the cached one.
   */
  plainRoutes?: boolean;
}

declare module "fastify" {
  interface FastifyInstance {
    services: {
      db: Db;
      outbox: Outbox;
      routes: RouteService;
      certificates: CertificateService;
      accessLogs: AccessLogService;
      writer: RouteWriter;
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
 * Builds the agent: the one composition root, where every area gets its adapters and shared mechanisms
 * (src/composition/). It does not listen (server.ts does), so tests build it and listen on port 0 or inject.
 * `config.proxy.caddyAdmin` must be resolved by now (server.ts starts the embedded Caddy first).
 */
export async function buildApp({
  config,
  logger,
  embeddedCaddy,
  caddyAdmin: givenAdmin,
  now = Date.now,
  serverFactory,
  openApiGenerator,
  plainRoutes,
}: AppOptions): Promise<App> {
  const caddyAddress = config.proxy.caddyAdmin;
  if (!caddyAddress) throw new Error("buildApp needs a Caddy admin address (start the embedded Caddy first)");
  const db = openDatabase(config.agent.dataDir, [
    ...outboxMigrations,
    ...proxyMigrations,
    ...systemMigrations,
    ...operatorMigrations,
    ...auditMigrations,
    ...onDemandMigrations,
    ...agentUpdateMigrations,
    ...connectMigrations,
  ]);
  const access = buildAccess(config, db, logger, now);
  const app = createFastify(config.agent, access.access.check, logger, serverFactory);
  const admin = givenAdmin ?? new CaddyAdmin(caddyAddress, config.proxy.caddyTimeoutMs);
  const connection = await buildConnection(config, app, db, logger);
  const areas = buildAreas(
    config,
    db,
    logger,
    { admin, embedded: embeddedCaddy, plainRoutes },
    now,
    connection,
  );
  const { outbox, routes, certificates, accessLogs, writer, caddyAdmin, operator, metrics } = areas;
  const { tokens, audit } = access;
  const services = {
    db,
    outbox,
    routes,
    certificates,
    accessLogs,
    writer,
    caddyAdmin,
    operator,
    metrics,
    tokens,
    audit,
  };
  app.decorate("services", services);
  await registerEdge(app, access, now);
  const generated = await openApiGenerator?.(app);
  registerRoutes(app, areas, access, generated);
  manageLifecycle(app, config, db, access, areas, connection.client, logger);
  return app;
}

/**
 * The edge every request meets before its route, in this order: its id echoed, a request without Host
 * refused as unreadable, `Expect` answered, a body over the limit refused, then the token checked (and the
 * request audited) before anything else runs, for every route; on the way out, basic-auth hashes are taken
 * out of the routes' answers to tokens that cannot write routes. Problems are mapped by the areas' mappers.
 */
async function registerEdge(app: App, { access, audit }: Access, now: () => number) {
  // JSON is the only body the API takes; anything else is 415 rather than a string failing validation.
  app.removeContentTypeParser("text/plain");
  const table = new RouteTable();
  requireRouteScopes(app);
  trackRoutes(app, table);
  app.decorate("registeredRoutes", () => table.routes());
  echoRequestId(app);
  // A collection asked for once the agent is quiet waits until requests stop (util/idle-gc.ts).
  app.addHook("onRequest", (_request, _reply, done) => {
    postponeIdleCollection();
    done();
  });
  registerProblemHandlers(app, table, [
    systemProblem,
    proxyProblem,
    certificatesProblem,
    operatorProblem,
    accessProblem,
    accessLogProblem,
    agentUpdateProblem,
  ]);
  answerExpectations(app, access.check);
  limitRequestBodies(app);
  registerAccessControl(app, access, auditMutations(app, audit, now));
  hideSecretsFromReaders(app);
  app.addSchema(ProblemSchema);
  for (const s of [
    ...proxySharedSchemas,
    ...certificatesSharedSchemas,
    ...operatorSharedSchemas,
    ...agentUpdateSharedSchemas,
  ])
    app.addSchema(s);
}

/**
 * Every area's routes; the callback-taking ones get the deny list their `callback_url` is checked against.
 * `generatedOpenApi` is the generator's document, served instead of the committed one (AppOptions).
 */
function registerRoutes(app: App, areas: Areas, { audit, tokens }: Access, generatedOpenApi?: () => unknown) {
  registerHealthRoutes(app, areas.health);
  registerOpenApiRoute(app, generatedOpenApi);
  registerProxyRoutes(app, areas.routes, areas.deny);
  registerCertificateRoutes(app, areas.certificates);
  registerAccessLogRoutes(app, areas.accessLogs);
  registerSystemRoutes(app, areas.system, areas.schedule, areas.deny);
  registerOperatorRoutes(app, areas.operator, areas.deny);
  registerAgentUpdateRoutes(app, areas.agentUpdate, areas.deny);
  registerEventRoutes(app, areas.outbox);
  registerMetricsRoutes(app, areas.metrics);
  registerAccessRoutes(app, audit, tokens);
}
