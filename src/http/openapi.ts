import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { FastifyInstance } from "fastify";
import { projectRoot } from "../paths.js";

/**
 * Where the OpenAPI document lives, under the project's root (the package's /usr/lib/hostkeeper). The agent
 * serves this file; `npm run docs:openapi` writes it from the routes' schemas, and a test keeps the two in step.
 * The generator (@fastify/swagger, with the YAML and schema-resolving libraries it loads) is not part of the
 * agent: it made the running agent's resident memory larger from its start, to regenerate a document that
 * only changes with a release.
 */
export const OPENAPI_DOC = join("docs", "openapi.json");

/**
 * Route schema key for a body a client may leave out. @fastify/swagger marks every body required (Fastify
 * needs one to validate); the route supplies `{}` itself, and the document must say the body is optional so a
 * generated client can call the operation without one.
 */
export const BODY_OPTIONAL = "x-body-optional";

declare module "fastify" {
  interface FastifySchema {
    [BODY_OPTIONAL]?: boolean;
    // The generator's keys the routes set, as @fastify/swagger declares them: the packages compile the
    // agent without the generator (scripts/openapi-doc.ts), so without its declarations.
    /** Left out of the document. */
    hide?: boolean;
    /** The scopes a token must hold (http/auth.ts sets it on every route). */
    security?: ReadonlyArray<{ [securityLabel: string]: readonly string[] }>;
  }
}

/**
 * `GET /v1/openapi.json`, readable with any valid token: the document says what exists, not what the token
 * may do with it. `generated` serves the generator's document instead (scripts/openapi-doc.ts, which
 * registers it); the agent reads the file on each request, so it holds nothing between them.
 */
export function registerOpenApiRoute(app: FastifyInstance, generated?: () => unknown): void {
  const file = join(projectRoot(), OPENAPI_DOC);
  app.get("/v1/openapi.json", { schema: { hide: true }, config: { scopes: [] } }, async (_req, reply) => {
    if (generated) return generated();
    const text = await readFile(file).catch((cause: unknown) => {
      throw new Error(`the OpenAPI document ${file} cannot be read (reinstall the package)`, { cause });
    });
    return reply.type("application/json; charset=utf-8").send(text);
  });
}
