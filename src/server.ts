import type { AddressInfo } from "node:net";
import type { Logger } from "pino";
import { buildApp } from "./app.js";
import { CaddyAdmin } from "./caddy/admin.js";
import { agentCaddyFields, settingsAtStart } from "./caddy/agent-fields.js";
import { issuanceWarnings, tlsAddresses } from "./caddy/issuance.js";
import { EmbeddedCaddy, embeddedCaddyAddress } from "./caddy/process/embedded.js";
import { writeCaddyEnvFile } from "./caddy/process/memory-limit.js";
import { showCaddyAdmin } from "./caddy/settings.js";
import { currentPrivileges, rootlessFailures, unknownEnvWarnings } from "./config-warnings.js";
import type { App } from "./http/types.js";
import { checkPlaintext, Listener } from "./listener/listener.js";
import { createLogger } from "./logging.js";
import { packageVersion } from "./paths.js";
import { type AppConfig, allSettings, loadConfigFromProcess, settingEnv } from "./settings.js";
import { prepareDataDir } from "./store/data-dir.js";
import { hostPort } from "./util/urls.js";

/**
 * The agent's process, what `hostkeeper serve` runs: configuration, the embedded Caddy (started or adopted,
 * then supervised) when none is configured, listen, graceful shutdown. Resolves once the agent listens; SIGTERM or SIGINT ends the
 * process. An invalid configuration throws its ConfigError before anything starts.
 */
export async function serve(): Promise<void> {
  const config = loadConfigFromProcess();
  const logger = await createLogger({ level: config.agent.logLevel, format: config.agent.logFormat });
  for (const warning of unknownEnvWarnings(process.env, allSettings())) logger.warn(warning);
  for (const warning of issuanceWarnings(config.proxy.caddyListen, config.proxy)) logger.warn(warning);
  const failing = rootlessFailures(config, currentPrivileges());
  if (failing.length > 0)
    logger.warn(
      { features: failing },
      `not running as root: these will fail: ${failing.join("; ")}. See docs/security.md, "What needs root"`,
    );
  // Before anything starts: plain HTTP beyond loopback is refused with the reason.
  if (config.agent.listen !== "off") checkPlaintext(config.agent.listen, config.listener);
  const listener = new Listener(config.listener, logger.child({ component: "listener" }));
  // Secrets stay out of the environment of every child the agent starts (Caddy, package managers, operator).
  delete process.env.HOSTKEEPER_TOKEN;
  delete process.env.HOSTKEEPER_WEBHOOK_SECRET;
  prepareDataDir(config.agent.dataDir);

  if (config.proxy.caddyEnvFile)
    writeCaddyEnvFile(config.proxy.caddyEnvFile, config.proxy.caddyMemoryLimitMb, logger);
  // The process's one client of Caddy's admin API, shared by the embedded Caddy's set-up and the app.
  const caddyAdmin = new CaddyAdmin(
    config.proxy.caddyAdmin ?? embeddedCaddyAddress(config.agent.dataDir),
    config.proxy.caddyTimeoutMs,
  );
  let embeddedCaddy: EmbeddedCaddy | undefined;
  if (!config.proxy.caddyAdmin) {
    embeddedCaddy = new EmbeddedCaddy({
      dataDir: config.agent.dataDir,
      binary: config.proxy.caddyBinary,
      server: config.proxy.caddyServer,
      listen: config.proxy.caddyListen,
      fields: agentCaddyFields(config.proxy),
      restartBackoffMs: config.proxy.caddyRestartBackoffMs,
      admin: caddyAdmin,
      logRoll: { sizeMb: config.proxy.caddyLogRollSizeMb, keep: config.proxy.caddyLogRollKeep },
      memoryLimitMb: config.proxy.caddyMemoryLimitMb,
      log: logger.child({ component: "embedded-caddy" }),
    });
    await embeddedCaddy.start();
    config.proxy.caddyAdmin = embeddedCaddy.address;
  }
  const app = await buildApp({
    config,
    logger,
    serverFactory: listener.factory,
    caddyAdmin,
    ...(embeddedCaddy ? { embeddedCaddy } : {}),
  });
  // Supervision ends as the agent begins to stop: a Caddy exiting from then on is not started again.
  if (embeddedCaddy) {
    const caddy = embeddedCaddy;
    app.addHook("preClose", () => caddy.close());
  }
  const { listen } = config.agent;
  // Off: the agent is reached only through its connection to the control plane (docs/connect.md).
  if (listen === "off") await app.ready();
  else await app.listen({ host: listen.host, port: listen.port });
  stopOnSignals(app, logger, config.agent.shutdownTimeoutMs);
  // After the handlers: a stop that comes while Caddy is asked its version is a graceful one.
  await logStart(logger, listener.scheme, app.server.address() as AddressInfo | null, config, embeddedCaddy);
}

/** SIGTERM and SIGINT close the app (in-flight requests finish) within `timeoutMs`, then end the process. */
function stopOnSignals(app: App, logger: Logger, timeoutMs: number): void {
  let closing = false;
  const shutdown = (signal: string) => {
    if (closing) return;
    closing = true;
    logger.info({ signal }, "shutting down; finishing in-flight requests");
    const force = setTimeout(() => {
      logger.error("in-flight requests did not finish in time; exiting");
      process.exit(1);
    }, timeoutMs);
    force.unref();
    app.close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => shutdown("SIGTERM"));
  process.on("SIGINT", () => shutdown("SIGINT"));
}

const showListen = ({ address, port }: AddressInfo) => hostPort({ host: address, port });

/**
 * The start line: versions and every address the agent and its Caddy listen on, in the fields for
 * machines and in the message for people.
 */
async function logStart(
  logger: Logger,
  scheme: "http" | "https",
  api: AddressInfo | null,
  config: AppConfig,
  embedded: EmbeddedCaddy | undefined,
): Promise<void> {
  const proxy = config.proxy;
  // Which of Caddy's settings outside the routes the agent wrote at start (caddy/agent-fields.ts).
  const caddySettings = settingsAtStart(
    agentCaddyFields(proxy),
    { ownCaddy: embedded === undefined, explicit: config.explicit },
    settingEnv,
  );
  const versions = {
    agent: packageVersion(),
    node: process.version,
    // Another's Caddy does not say its version through its admin API.
    caddy: embedded ? await embedded.caddyVersion() : null,
  };
  const listen = {
    api: api === null ? "off" : showListen(api),
    api_scheme: scheme,
    caddy_admin: proxy.caddyAdmin ? showCaddyAdmin(proxy.caddyAdmin) : null,
    caddy_server: proxy.caddyServer,
    caddy_listen: [...proxy.caddyListen],
  };
  // Which listen addresses serve TLS follows from the ports and the issuer (docs/https.md): said, not guessed.
  const tls = {
    issuer: proxy.tlsIssuer,
    http_port: proxy.caddyHttpPort,
    https_port: proxy.caddyHttpsPort,
    caddy_listen_tls: [...new Set(tlsAddresses(proxy.caddyListen, proxy).map((a) => a.text))],
  };
  logger.info(
    {
      versions,
      listen,
      tls,
      caddy_mode: embedded ? "embedded" : "external",
      caddy_settings_applied: caddySettings.applied ?? "all",
      connect_url: config.connect.url ?? null,
    },
    `hostkeeper ${versions.agent} started on Node ${versions.node} with ${embedded ? "embedded" : "external"} Caddy ${versions.caddy ?? "(version unknown)"}; ` +
      `API ${api === null ? "off (reached through the connection to the control plane only)" : `on ${scheme}://${listen.api}`}, Caddy admin on ${listen.caddy_admin}, managed server ${listen.caddy_server} on ${listen.caddy_listen.join(", ")}; ${caddySettings.text}`,
  );
}
