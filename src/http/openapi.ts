import swagger from "@fastify/swagger";
import type { FastifyInstance } from "fastify";
import { ProblemSchema } from "./schemas.js";

export const apiDescription = `Host-management agent. Every endpoint requires \`Authorization: Bearer <token>\`; a missing or wrong token is 401,
a token without the operation's scopes (its security requirement) 403 \`insufficient_scope\`, and repeated failures from one address 429.
Every error is an RFC 9457 \`application/problem+json\` body with \`type\` (\`urn:hostkeeper:problem:<code>\`),
\`title\`, \`status\`, \`detail\` and \`code\`; validation errors list each offending field in \`errors\`.
Unknown request fields are rejected. Callbacks (\`route_backup\`, \`route_change\`, \`operator_update\`, \`system_update\`) are JSON POSTs signed
as Standard Webhooks (\`webhook-id\`, \`webhook-timestamp\`, \`webhook-signature\`); see docs/api/callbacks.md.`;

/**
 * Route schema key for a body a client may leave out. @fastify/swagger marks every body required (Fastify
 * needs one to validate); the route supplies `{}` itself, and the document must say the body is optional so a
 * generated client can call the operation without one.
 */
export const BODY_OPTIONAL = "x-body-optional";

declare module "fastify" {
  interface FastifySchema {
    [BODY_OPTIONAL]?: boolean;
  }
}

type Operation = Record<string, unknown> & { requestBody?: { required?: boolean } };

function markOptionalBodies(doc: { paths?: Record<string, Record<string, Operation>> }): void {
  for (const item of Object.values(doc.paths ?? {}))
    for (const op of Object.values(item)) {
      if (typeof op !== "object" || op === null || !(BODY_OPTIONAL in op)) continue;
      delete op[BODY_OPTIONAL];
      if (op.requestBody) op.requestBody.required = false;
    }
}

/** Registers the OpenAPI 3.1 generator; must run before any route is added. */
export async function registerOpenApi(app: FastifyInstance): Promise<void> {
  app.addSchema(ProblemSchema);
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
}
