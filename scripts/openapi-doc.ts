import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import swagger from "@fastify/swagger";
import pino from "pino";
import { buildApp } from "../src/app.js";
import { BODY_OPTIONAL, OPENAPI_DOC } from "../src/http/openapi.js";
import type { App } from "../src/http/types.js";
import { projectRoot } from "../src/paths.js";
import { loadConfig } from "../src/settings.js";

export { OPENAPI_DOC };

const apiDescription = `Host-management agent. Every endpoint requires \`Authorization: Bearer <token>\`; a missing or wrong token is 401,
a token without the operation's scopes (its security requirement) 403 \`insufficient_scope\`, and repeated failures from one address 429.
Every error is an RFC 9457 \`application/problem+json\` body with \`type\` (\`urn:hostkeeper:problem:<code>\`),
\`title\`, \`status\`, \`detail\` and \`code\`; validation errors list each offending field in \`errors\`.
Unknown request fields are rejected. Callbacks (\`route_backup\`, \`route_change\`, \`operator_update\`, \`system_update\`) are JSON POSTs signed
as Standard Webhooks (\`webhook-id\`, \`webhook-timestamp\`, \`webhook-signature\`); see docs/api/callbacks.md.`;

type Operation = Record<string, unknown> & { requestBody?: { required?: boolean } };

function markOptionalBodies(doc: { paths?: Record<string, Record<string, Operation>> }): void {
  for (const item of Object.values(doc.paths ?? {}))
    for (const op of Object.values(item)) {
      if (typeof op !== "object" || op === null || !(BODY_OPTIONAL in op)) continue;
      delete op[BODY_OPTIONAL];
      if (op.requestBody) op.requestBody.required = false;
    }
}

/**
 * Registers the OpenAPI 3.1 generator on an app whose routes are not added yet, and gives the document it
 * makes of them (buildApp's `openApiGenerator`). Only this script and the tests load it: the agent serves
 * the committed file.
 */
export async function openApiGenerator(app: App): Promise<() => unknown> {
  await app.register(swagger, {
    openapi: {
      openapi: "3.1.0",
      info: { title: "Hostkeeper host-management API", version: "1.0.0", description: apiDescription },
      components: {
        securitySchemes: {
          bearer: {
            type: "http",
            scheme: "bearer",
            description:
              "A token of `HOSTKEEPER_TOKENS_FILE` or the agent's own. Each operation's requirement lists the scopes the token must hold, all of them: `proxy:read`, `proxy:write`, `system:read`, `system:write`, `operator:read`, `operator:write`; `*` holds every scope and is itself required by the audit trail and token rotation.",
          },
        },
      },
      security: [{ bearer: [] }],
      servers: [{ url: "/", description: "The agent that serves this document (`HOSTKEEPER_LISTEN`)." }],
    },
    transformObject: (documents) => {
      if (!("openapiObject" in documents)) return documents.swaggerObject;
      markOptionalBodies(documents.openapiObject as Parameters<typeof markOptionalBodies>[0]);
      return documents.openapiObject;
    },
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) =>
        typeof json.$id === "string" ? json.$id : `def-${i}`,
    },
  });
  return () => app.swagger();
}

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
    const app = await buildApp({ config, logger: pino({ level: "silent" }), openApiGenerator });
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
