import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { buildApp } from "../src/app.js";
import type { App } from "../src/http/types.js";
import { projectRoot } from "../src/paths.js";
import { loadConfig } from "../src/settings.js";

/** Where the committed copy of the OpenAPI document lives, for readers without a running agent. */
export const OPENAPI_DOC = join("docs", "openapi.json");

/**
 * Builds the agent as the tests do and hands it to `use`, then closes it. No Caddy is needed: routes and
 * their schemas are registered without asking Caddy anything, and the start-up work that does ask it only
 * logs its failure. Everything the app writes goes to a temporary folder, removed afterwards.
 */
export async function withBuiltApp<T>(use: (app: App) => T | Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), "hk-docs-"));
  const emptyRoot = join(dir, "empty-root");
  mkdirSync(emptyRoot);
  try {
    const config = loadConfig({
      env: {
        HOSTKEEPER_DATA_DIR: dir,
        HOSTKEEPER_TOKEN: "docs-token-0123456789abcdef",
        HOSTKEEPER_WEBHOOK_SECRET: `whsec_${Buffer.alloc(32, 7).toString("base64")}`,
        HOSTKEEPER_CADDY_ADMIN: `unix:${join(dir, "no-caddy.sock")}`,
        HOSTKEEPER_PACKAGE_MANAGER: "dnf",
        HOSTKEEPER_DNF_INSTALLROOT: emptyRoot,
        HOSTKEEPER_REBOOT_COMMAND: "true",
      },
    });
    const app = await buildApp({ config, logger: pino({ level: "silent" }) });
    try {
      await app.ready();
      return await use(app);
    } finally {
      await app.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The OpenAPI document the agent serves at `GET /v1/openapi.json`, as the committed file holds it. */
export function openApiText(app: App): string {
  return `${JSON.stringify(app.swagger(), null, 2)}\n`;
}

if (process.argv[1]?.endsWith("openapi-doc.js")) {
  const text = await withBuiltApp(openApiText);
  writeFileSync(join(projectRoot(), OPENAPI_DOC), text);
  console.log(`${OPENAPI_DOC} written from the agent's schemas`);
}
