import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { ApiError } from "./errors.js";

const digest = (s: string) => createHash("sha256").update(s).digest();

/**
 * Requires `Authorization: Bearer <token>` on every `/v1` path. Both sides are hashed first so the
 * comparison takes the same time whatever the length of the presented token.
 */
export function registerBearerAuth(app: FastifyInstance, token: string): void {
  const expected = digest(token);
  app.addHook("onRequest", async (request) => {
    if (!request.url.startsWith("/v1/") && request.url !== "/v1") return;
    const header = request.headers.authorization;
    const m = header ? /^Bearer[ ]+(\S+)\s*$/i.exec(header) : null;
    if (!m?.[1] || !timingSafeEqual(digest(m[1]), expected))
      throw new ApiError(
        "unauthorized",
        header ? "the bearer token is not valid" : "an Authorization: Bearer header is required",
      );
  });
}
