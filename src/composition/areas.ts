import { join } from "node:path";
import type { Logger } from "pino";
import { AccessLogKeeper } from "../access-logs/keeper.js";
import { AccessLogService } from "../access-logs/service.js";
import { AgentUpdateService } from "../agent-update/service.js";
import type { AccessLogFiles } from "../caddy/access-log-json.js";
import type { CaddyAdmin } from "../caddy/admin.js";
import { agentCaddyFields, fieldsAtStart, issuerApplied } from "../caddy/agent-fields.js";
import { CaddyConfig } from "../caddy/config.js";
import { CaddyConfigFields } from "../caddy/config-fields.js";
import { embeddedCaddyFiles } from "../caddy/process/files.js";
import { CachedRoutes } from "../caddy/routes/cached-routes.js";
import { CaddyRoutes, type RoutesStore } from "../caddy/routes/caddy-routes.js";
import { CaddyTlsConfig } from "../caddy/tls-config.js";
import { CustomCertificateStore } from "../certificates/custom-store.js";
import { OnDemandAsk } from "../certificates/on-demand-ask.js";
import { OnDemandGate } from "../certificates/on-demand-gate.js";
import { OnDemandKeeper } from "../certificates/on-demand-keeper.js";
import { OnDemandHosts } from "../certificates/on-demand-store.js";
import { CertificateService } from "../certificates/service.js";
import { DenyList } from "../events/egress.js";
import { Outbox } from "../events/outbox.js";
import { HealthService, type SupervisedCaddy } from "../health/service.js";
import { Metrics } from "../metrics/metrics.js";
import { OperatorService } from "../operator/service.js";
import { allHooks } from "../proxy/batch-hooks.js";
import { ChangeJournal } from "../proxy/journal.js";
import { httpsRedirect } from "../proxy/route/https-redirect.js";
import { ownEndpoints, UpstreamCheck } from "../proxy/route/upstream-check.js";
import { RouteService } from "../proxy/service.js";
import { RouteChangeStore } from "../proxy/store.js";
import { GATHER, RouteWriter } from "../proxy/writer.js";
import type { AppConfig } from "../settings.js";
import type { Db } from "../store/db.js";
import { generateWebhookSecret, loadOrCreateSecret } from "../store/secrets.js";
import { allStageHooks, hookWarnings } from "../system/hooks/hook-files.js";
import { Hooks } from "../system/hooks/hooks.js";
import { createPackageManager } from "../system/packages/select.js";
import { RestartFinder } from "../system/restarts/services-restart.js";
import { Scheduler } from "../system/schedule/scheduler.js";
import { ScheduleService } from "../system/schedule/service.js";
import { ScheduleStore } from "../system/schedule/store.js";
import { SystemService } from "../system/service.js";
import type { Connection } from "./connect.js";

/** Every area's service, with the shared mechanisms and adapters they were given. */
export interface Areas {
  metrics: Metrics;
  deny: DenyList;
  outbox: Outbox;
  caddyAdmin: CaddyAdmin;
  writer: RouteWriter;
  routes: RouteService;
  certificates: CertificateService;
  accessLogs: AccessLogService;
  /** The endpoint Caddy asks before an on-demand certificate; closed with the app. */
  onDemandAsk: OnDemandAsk;
  system: SystemService;
  schedule: ScheduleService;
  operator: OperatorService;
  agentUpdate: AgentUpdateService;
  health: HealthService;
}

/**
 * Builds the areas: the callbacks' outbox first (every area writes to it), then the routes (the operator's
 * switch goes through them), the package updates, the operator's self-update, and health, which reads all.
 */
export function buildAreas(
  config: AppConfig,
  db: Db,
  logger: Logger,
  caddy: { admin: CaddyAdmin; embedded: SupervisedCaddy | undefined; plainRoutes?: boolean },
  now: () => number,
  connection: Connection,
): Areas {
  const { agent, events, proxy } = config;
  const { admin: caddyAdmin, embedded: embeddedCaddy } = caddy;
  const metrics = new Metrics();
  caddyAdmin.countIn(metrics);
  const deny = new DenyList(events.webhookDenyCidrs, connection.client !== undefined);
  const outbox = new Outbox(db, {
    metrics,
    secret:
      events.webhookSecret ??
      loadOrCreateSecret(agent.dataDir, "webhook-secret", generateWebhookSecret).value,
    deny,
    timeoutMs: events.webhookTimeoutMs,
    retryScheduleSeconds: events.webhookRetrySchedule,
    log: logger.child({ component: "outbox" }),
    channel: connection.client,
  });
  metrics.readOutboxStates(() => outbox.countByState());
  // The writer, the routes and access logs' services and the on-demand endpoint are areas of their own.
  const routesArea = buildRoutes(config, db, logger, { metrics, outbox, caddyAdmin, caddy });
  const { caddyRoutes, routes } = routesArea;
  const certificates = new CertificateService({
    // Not counted: the admin API's metrics are those of the requests made for routes.
    tls: new CaddyTlsConfig(new CaddyConfig(caddyAdmin, { counted: false })),
    store: new CustomCertificateStore(agent.dataDir),
    routesText: () => caddyRoutes.text(),
    onDemandHosts: () => routesArea.onDemandHosts.all(),
    caddyDataDir: embeddedCaddy
      ? embeddedCaddyFiles(agent.dataDir).dataHome
      : config.certificates.caddyDataDir,
    warningDays: config.certificates.certExpiryWarningDays,
    operatorDomain: proxy.operatorDomain,
    caddyJournalUnit: embeddedCaddy ? undefined : config.certificates.caddyJournalUnit,
    now,
    log: logger.child({ component: "certificates" }),
  });
  metrics.readCertificates(() => certificates.list());
  const system = buildSystem(config, db, logger, { metrics, outbox, now });
  const schedule = buildSchedule(db, logger, system, now);
  const operator = new OperatorService({
    db,
    metrics,
    outbox,
    routes,
    config: config.operator,
    dataDir: agent.dataDir,
    log: logger.child({ component: "operator" }),
  });
  const agentUpdate = buildAgentUpdate(config, db, outbox, logger);
  const health = buildHealth(
    config,
    db,
    { caddyAdmin, embeddedCaddy, system, operator, agentUpdate, outbox },
    metrics,
    connection,
  );
  return {
    metrics,
    deny,
    outbox,
    caddyAdmin,
    ...routesArea,
    certificates,
    system,
    schedule,
    operator,
    agentUpdate,
    health,
  };
}

/** Health, which reads every area, and the metrics of the embedded Caddy and the connection. */
function buildHealth(
  config: AppConfig,
  db: Db,
  parts: {
    caddyAdmin: CaddyAdmin;
    embeddedCaddy: SupervisedCaddy | undefined;
    system: SystemService;
    operator: OperatorService;
    agentUpdate: AgentUpdateService;
    outbox: Outbox;
  },
  metrics: Metrics,
  connection: Connection,
): HealthService {
  const { caddyAdmin, embeddedCaddy, system, operator, agentUpdate, outbox } = parts;
  const client = connection.client;
  if (client) metrics.readConnection(() => client.status());
  metrics.readCaddyRestarts(() => embeddedCaddy?.status().restarts ?? 0);
  return new HealthService({
    db,
    caddyAdmin,
    server: config.proxy.caddyServer,
    embedded: embeddedCaddy,
    system,
    operator,
    agentUpdate,
    outbox,
    identity: connection.identity,
    connection: client,
  });
}

/** The agent's own self-update. */
function buildAgentUpdate(config: AppConfig, db: Db, outbox: Outbox, logger: Logger): AgentUpdateService {
  return new AgentUpdateService({ db, outbox, config, log: logger.child({ component: "agent-update" }) });
}

interface Shared {
  metrics: Metrics;
  outbox: Outbox;
}

/**
 * Where Caddy writes the routes' access logs: the setting, else the embedded Caddy's folder; none for an
 * external Caddy without the setting (the agent cannot know where that Caddy may write).
 */
function accessLogFiles(config: AppConfig, embedded: boolean): AccessLogFiles | undefined {
  const { accessLogDir, accessLogRollMb, accessLogKeep } = config.accessLogs;
  const dir =
    accessLogDir ??
    (embedded ? join(embeddedCaddyFiles(config.agent.dataDir).dir, "access-logs") : undefined);
  return dir === undefined ? undefined : { dir, rollMb: accessLogRollMb, keep: accessLogKeep };
}

/**
 * The routes area: Caddy's routes (read for every change, or `CachedRoutes` keeping what it learnt), its
 * store, the journal of changes, the one writer of Caddy's routes (keeping the access logs in line around
 * its batches), the service, and the access logs' own service.
 */
function buildRoutes(
  config: AppConfig,
  db: Db,
  logger: Logger,
  o: Shared & {
    caddyAdmin: CaddyAdmin;
    caddy: { embedded: SupervisedCaddy | undefined; plainRoutes?: boolean };
  },
) {
  const { events, proxy } = config;
  const files = accessLogFiles(config, o.caddy.embedded !== undefined);
  const accessLog = logger.child({ component: "access-logs" });
  const keeper = new AccessLogKeeper(o.caddyAdmin, proxy.caddyServer, files, accessLog);
  const store = new RouteChangeStore(db);
  const journal = new ChangeJournal({
    store,
    outbox: o.outbox,
    firstAttemptTimeoutMs: events.webhookFirstAttemptTimeoutMs,
  });
  const fields = agentCaddyFields(proxy);
  const writerLog = logger.child({ component: "route-writer" });
  const where = { server: proxy.caddyServer, listen: proxy.caddyListen, fields, log: writerLog };
  const caddyRoutes: RoutesStore = o.caddy.plainRoutes
    ? new CaddyRoutes(o.caddyAdmin, where)
    : new CachedRoutes(o.caddyAdmin, where);
  const atStart = { ownCaddy: o.caddy.embedded === undefined, explicit: config.explicit };
  // The redirect and on-demand issuance go with the issuer the agent applies (none with `off`).
  const tls = proxy.tlsIssuer !== "off" && issuerApplied(atStart);
  const lead = httpsRedirect({ enabled: tls, httpsPort: proxy.caddyHttpsPort });
  const onDemand = buildOnDemand(config, db, logger, {
    caddyAdmin: o.caddyAdmin,
    routes: caddyRoutes,
    enabled: tls,
  });
  const writer = new RouteWriter(caddyRoutes, {
    lead,
    journal,
    config: new CaddyConfigFields(o.caddyAdmin),
    metrics: o.metrics,
    gather: { ...GATHER, maxMs: proxy.routeGatherMaxMs },
    hooks: allHooks([keeper, onDemand.keeper]),
    log: writerLog,
  });
  const routes = new RouteService({
    metrics: o.metrics,
    writer,
    routes: caddyRoutes,
    journal,
    store,
    operatorRouteId: proxy.operatorDomain,
    connections: {
      streamCloseDelayMs: proxy.caddyStreamCloseDelayMs,
      fields: fieldsAtStart(fields, atStart),
      lead,
    },
    accessLogs: files !== undefined,
    upstreams: upstreamCheck(config),
    log: logger.child({ component: "routes" }),
  });
  const accessLogs = new AccessLogService({
    routes,
    writer,
    keeper,
    files,
    keepDays: config.accessLogs.accessLogKeepDays,
    log: accessLog,
  });
  return {
    caddyRoutes,
    writer,
    routes,
    accessLogs,
    onDemandAsk: onDemand.ask,
    onDemandHosts: onDemand.hosts,
  };
}

/** Where upstreams may not point: HOSTKEEPER_UPSTREAM_DENY_CIDRS and the agent's own ports. */
function upstreamCheck(config: AppConfig): UpstreamCheck {
  const { proxy } = config;
  const own = ownEndpoints({
    listen: config.agent.listen,
    caddyAdmin: proxy.caddyAdmin,
    operatorPorts: config.operator.ports,
  });
  return new UpstreamCheck({ deny: proxy.upstreamDenyCidrs, own });
}

/**
 * On-demand issuance for wildcard routes: the hosts allowed so far, the gate deciding on a host, the
 * loopback endpoint Caddy asks (started when a wildcard route first needs it), and the keeper of Caddy's
 * policy among the writer's hooks.
 */
function buildOnDemand(
  config: AppConfig,
  db: Db,
  logger: Logger,
  o: { caddyAdmin: CaddyAdmin; routes: RoutesStore; enabled: boolean },
) {
  const log = logger.child({ component: "on-demand" });
  const hosts = new OnDemandHosts(db);
  const { onDemandMaxPerRoute: maxPerRoute, onDemandRate: perMinute } = config.certificates;
  const gate = new OnDemandGate({ routes: o.routes, hosts, limits: { maxPerRoute, perMinute }, log });
  const ask = new OnDemandAsk(gate, log);
  const keeper = new OnDemandKeeper({
    admin: o.caddyAdmin,
    server: config.proxy.caddyServer,
    issuance: config.proxy,
    enabled: o.enabled,
    endpoint: () => ask.start(),
    hosts,
    log,
  });
  return { ask, keeper, hosts };
}

/** The package updates area, on the package manager the settings (or the host) select. */
function buildSystem(
  config: AppConfig,
  db: Db,
  logger: Logger,
  o: Shared & { now: () => number },
): SystemService {
  const { system } = config;
  const log = logger.child({ component: "system" });
  // Each hook the agent will not run, said at start (and by `hostkeeper config check`).
  for (const warning of hookWarnings(allStageHooks(system.hooksDir))) log.warn(warning);
  const service = new SystemService({
    db,
    metrics: o.metrics,
    manager: createPackageManager(system, process.env, log),
    restarts: new RestartFinder({
      command: system.servicesRestartCommand,
      procRoot: "/proc",
      env: process.env,
      timeoutMs: system.commandTimeoutMs,
    }),
    minFreeMb: system.minFreeMb,
    lockTimeoutMs: system.lockTimeoutMs,
    rebootCommand: system.rebootCommand,
    rebootDelayMs: system.rebootDelayMs,
    boot: { bootIdFile: system.bootIdFile, kernelReleaseFile: system.kernelReleaseFile },
    outbox: o.outbox,
    hooks: new Hooks({
      dir: system.hooksDir,
      timeoutMs: system.hookTimeoutS * 1000,
      workDir: join(config.agent.dataDir, "hooks"),
      env: process.env,
      log,
    }),
    env: process.env,
    now: o.now,
    log,
  });
  o.metrics.readCompliance(service.packageManager, () => service.compliance());
  return service;
}

/** The maintenance schedule: its store and the scheduler that runs its slots' applies, on the agent's clock. */
function buildSchedule(db: Db, logger: Logger, system: SystemService, now: () => number): ScheduleService {
  const log = logger.child({ component: "schedule" });
  const store = new ScheduleStore(db);
  const scheduler = new Scheduler({ store, system, now, random: Math.random, log });
  return new ScheduleService({ store, scheduler, now, log });
}
