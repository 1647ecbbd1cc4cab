import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import type { Response as LightMyRequestResponse } from "light-my-request";
import pino from "pino";
import { buildApp } from "../../src/app.js";
import type { App } from "../../src/http/types.js";
import { type AppConfig, loadConfig } from "../../src/settings.js";
import { guardAptConfig } from "./apt-guard.js";

export const TEST_TOKEN = "test-token-0123456789abcdef";

/**
 * `TEST_ROUTES_BACKEND=plain`: every test agent reads Caddy's routes for every change and read, without the
 * cached store's machinery (AppOptions.plainRoutes). `npm test` runs the routes tests both ways; a test of
 * that machinery itself skips under it, saying so.
 */
export const PLAIN_ROUTES = process.env.TEST_ROUTES_BACKEND === "plain";
export const TEST_SECRET = `whsec_${Buffer.alloc(32, 7).toString("base64")}`;

export interface TestApp {
  app: App;
  config: AppConfig;
  dataDir: string;
  /** `app.inject` with the bearer token set. */
  call: (opts: {
    method: string;
    url: string;
    payload?: unknown;
    headers?: Record<string, string>;
  }) => Promise<LightMyRequestResponse>;
}

/**
 * Builds the app against the given environment (plus a temp data dir, a fixed token and webhook secret),
 * closed when the test ends. `env` uses the real variable names, so tests exercise the config loader too.
 * `opts.logger` replaces the silent logger, for a test that reads what the agent logs.
 */
export async function buildTestApp(
  t: TestContext | { after: (fn: () => unknown) => void },
  env: Record<string, string>,
  opts: { dataDir?: string; now?: () => number; logger?: pino.Logger } = {},
): Promise<TestApp> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), "hk-data-"));
  const removeDataDir = () => {
    if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
  };
  let app: Awaited<ReturnType<typeof buildApp>>;
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig({
      env: {
        HOSTKEEPER_DATA_DIR: dataDir,
        HOSTKEEPER_TOKEN: TEST_TOKEN,
        HOSTKEEPER_WEBHOOK_SECRET: TEST_SECRET,
        // Never this machine's packages or a real reboot, whatever a test leaves out.
        HOSTKEEPER_APT_CONFIG: guardAptConfig(t),
        HOSTKEEPER_REBOOT_COMMAND: "/bin/true",
        // Never hooks this machine may have in the default folder.
        HOSTKEEPER_HOOKS_DIR: "/nonexistent/hostkeeper-test-hooks",
        // Plain HTTP on every listen address, as test Caddys' servers have (`startCaddy`), unless a test
        // asks for an issuer.
        HOSTKEEPER_TLS_ISSUER: "off",
        ...env,
      },
    });
    const logger = opts.logger ?? pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" });
    app = await buildApp({
      config,
      logger,
      plainRoutes: PLAIN_ROUTES,
      ...(opts.now ? { now: opts.now } : {}),
    });
  } catch (err) {
    // A start a test expects to fail leaves no data folder behind.
    removeDataDir();
    throw err;
  }
  t.after(async () => {
    await app.close();
    removeDataDir();
  });
  await app.ready();
  // The start's own Caddy work (stream_close_delay on existing routes, grace_period, the access logs) is
  // done before a test counts or intercepts writes.
  await app.services.routes.whenConformed();
  await app.services.accessLogs.whenStarted();
  await app.services.writer.whenIdle();
  const call: TestApp["call"] = ({ method, url, payload, headers }) =>
    app.inject({
      method: method as "GET",
      url,
      ...(payload === undefined ? {} : { payload: payload as string }),
      headers: { authorization: `Bearer ${TEST_TOKEN}`, ...headers },
    });
  return { app, config, dataDir, call };
}
