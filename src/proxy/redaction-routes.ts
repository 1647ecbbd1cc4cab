import type { FastifyRequest } from "fastify";
import { missingScopes } from "../access/scopes.js";
import type { App } from "../http/types.js";
import { redactPayload } from "./redaction.js";

/**
 * The answers that can carry a route's JSON (Caddy's or a write request's): everything under `/v1/proxy`
 * (the routes, one route, its request, its history, and whatever is added there later) and `/v1/events`
 * (`route_backup` and `route_change` bodies hold routes).
 */
const CARRIES_ROUTES = /^\/v1\/(?:proxy|events)(?:\/|$)/;

/** A token that can write routes can set any password hash anyway; only it reads them. */
const seesSecrets = (request: FastifyRequest): boolean =>
  request.principal !== undefined && missingScopes(request.principal.scopes, ["proxy:write"]).length === 0;

/**
 * Basic-auth hashes are for `proxy:write` tokens only: every answer of those paths to any other token has
 * them replaced (src/proxy/redaction.ts) on its way out, whatever route made it, so a read added later
 * cannot forget it. The stored data keeps them (a restore puts the real hash back), and so do callbacks,
 * which go to whoever wrote the route. A token that sees them pays nothing: its answer is not looked at.
 * Register before the routes.
 */
export function hideSecretsFromReaders(app: App): void {
  app.addHook("onSend", async (request, _reply, payload) => {
    const url = request.routeOptions.url;
    if (url === undefined || !CARRIES_ROUTES.test(url) || seesSecrets(request)) return payload;
    return redactPayload(payload);
  });
}
