import pino from "pino";
import { buildApp } from "./app.js";
import { EmbeddedCaddy } from "./proxy/embedded-caddy.js";
import { loadConfigFromProcess } from "./settings.js";
import { prepareDataDir } from "./store/data-dir.js";

/**
 * The agent's process, what `hostkeeper serve` runs: configuration, the embedded Caddy (started or adopted,
 * then supervised) when none is configured, listen, graceful shutdown. Resolves once the agent listens; SIGTERM or SIGINT ends the
 * process. An invalid configuration throws its ConfigError before anything starts.
 */
export async function serve(): Promise<void> {
  const config = loadConfigFromProcess();
  const logger = pino({
    level: config.agent.logLevel,
    redact: { paths: ["req.headers.authorization", "token", "secret"], censor: "[redacted]" },
  });
  // Secrets stay out of the environment of every child the agent starts (Caddy, package managers, operator).
  delete process.env.HOSTKEEPER_TOKEN;
  delete process.env.HOSTKEEPER_WEBHOOK_SECRET;
  prepareDataDir(config.agent.dataDir);

  let embeddedCaddy: EmbeddedCaddy | undefined;
  if (!config.proxy.caddyAdmin) {
    embeddedCaddy = new EmbeddedCaddy({
      dataDir: config.agent.dataDir,
      binary: config.proxy.caddyBinary,
      server: config.proxy.caddyServer,
      listen: config.proxy.caddyListen,
      restartBackoffMs: config.proxy.caddyRestartBackoffMs,
      adminTimeoutMs: config.proxy.caddyTimeoutMs,
      log: logger.child({ component: "embedded-caddy" }),
    });
    await embeddedCaddy.start();
    config.proxy.caddyAdmin = embeddedCaddy.address;
  }
  const app = await buildApp({ config, logger, ...(embeddedCaddy ? { embeddedCaddy } : {}) });
  // Supervision ends as the agent begins to stop: a Caddy exiting from then on is not started again.
  if (embeddedCaddy) {
    const caddy = embeddedCaddy;
    app.addHook("preClose", () => caddy.close());
  }
  await app.listen({ host: config.agent.listen.host, port: config.agent.listen.port });

  let closing = false;
  const shutdown = (signal: string) => {
    if (closing) return;
    closing = true;
    logger.info({ signal }, "shutting down; finishing in-flight requests");
    const force = setTimeout(() => {
      logger.error("in-flight requests did not finish in time; exiting");
      process.exit(1);
    }, config.agent.shutdownTimeoutMs);
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
