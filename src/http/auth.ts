import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { ApiError } from "./errors.js";

declare module "fastify" {
  interface FastifyContextConfig {
    /**
     * Answers without a token. Only liveness probes set it; every other route, an unknown path included,
     * requires the token, so a route added later is protected without anyone remembering to.
     */
    public?: boolean;
  }
}

const digest = (s: string) => createHash("sha256").update(s).digest();

/** Checks an `Authorization` header value against the agent's token. */
export type TokenCheck = (authorization: string | undefined) => ApiError | undefined;

/**
 * `Authorization: Bearer <token>`, compared in constant time: both sides are hashed first so the comparison
 * takes the same time whatever the length of the presented token.
 */
export function bearerTokenCheck(token: string): TokenCheck {
  const expected = digest(token);
  return (header) => {
    const m = header ? /^Bearer[ ]+(\S+)\s*$/i.exec(header) : null;
    if (m?.[1] && timingSafeEqual(digest(m[1]), expected)) return undefined;
    return new ApiError(
      "unauthorized",
      header ? "the bearer token is not valid" : "an Authorization: Bearer header is required",
    );
  };
}

/**
 * The token is decided on the route the router matched, never on the spelling of the URL: `/%76%31/...`,
 * `//v1/...` or `/v1/./...` reach the same route, or the not-found handler, and both run this hook first.
 * It is the first hook of the root scope, so it runs before body parsing, validation and every other hook.
 */
export function registerBearerAuth(app: FastifyInstance, check: TokenCheck): void {
  app.addHook("onRequest", async (request) => {
    if (request.is404 !== true && request.routeOptions.config.public === true) return;
    const refused = check(request.headers.authorization);
    if (refused) throw refused;
  });
}
