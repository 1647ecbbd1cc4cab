import { randomUUID } from "node:crypto";
import type { FastifyInstance } from "fastify";
import type { IncomingMessage } from "../util/node-builtins.js";

export const REQUEST_ID_HEADER = "x-request-id";
export const MAX_REQUEST_ID_LENGTH = 128;

/**
 * What a caller's id may hold: it goes into log lines, response headers, the records and the callbacks,
 * so no control characters, spaces or quotes. UUIDs, ULIDs, trace ids and `svc:1234/5` all fit.
 */
const SAFE_REQUEST_ID = /^[A-Za-z0-9._:/+=@-]+$/;

/** The caller's `x-request-id` when it is safe to carry, else undefined. */
export function callerRequestId(header: string | string[] | undefined): string | undefined {
  if (typeof header !== "string") return undefined;
  if (header.length === 0 || header.length > MAX_REQUEST_ID_LENGTH) return undefined;
  return SAFE_REQUEST_ID.test(header) ? header : undefined;
}

/**
 * Fastify's `genReqId`: the caller's id when it is usable, so one id follows a request through the
 * caller's logs, the agent's log lines, its records and its callbacks; a new UUID otherwise (absent,
 * too long, or holding characters outside the safe set).
 */
export function genReqId(req: IncomingMessage): string {
  return callerRequestId(req.headers[REQUEST_ID_HEADER]) ?? randomUUID();
}

/**
 * Every answer carries the request's id, problems included: set in the first hook of the root scope, so
 * an answer from any later hook, handler or error handler has it already.
 */
export function echoRequestId(app: FastifyInstance): void {
  app.addHook("onRequest", async (request, reply) => {
    void reply.header(REQUEST_ID_HEADER, request.id);
  });
}
