import swagger from "@fastify/swagger";
import type { FastifyInstance } from "fastify";
import { ProblemSchema } from "./schemas.js";

export const apiDescription = `Host-management agent. Every \`/v1\` endpoint requires \`Authorization: Bearer <token>\`.
Every error is an RFC 9457 \`application/problem+json\` body with \`type\` (\`urn:hostkeeper:problem:<code>\`),
\`title\`, \`status\`, \`detail\` and \`code\`; validation errors list each offending field in \`errors\`.
Unknown request fields are rejected. Callbacks (\`route_backup\`, \`operator_update\`) are JSON POSTs signed
as Standard Webhooks (\`webhook-id\`, \`webhook-timestamp\`, \`webhook-signature\`); see the README.`;

/** Registers the OpenAPI 3.1 generator; must run before any route is added. */
export async function registerOpenApi(app: FastifyInstance): Promise<void> {
  app.addSchema(ProblemSchema);
  await app.register(swagger, {
    openapi: {
      openapi: "3.1.0",
      info: { title: "Hostkeeper host-management API", version: "1.0.0", description: apiDescription },
      components: {
        securitySchemes: { bearer: { type: "http", scheme: "bearer" } },
      },
      security: [{ bearer: [] }],
    },
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) =>
        typeof json.$id === "string" ? json.$id : `def-${i}`,
    },
  });
}
