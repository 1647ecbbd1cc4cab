import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { type AuditLog, type AuditSummary, outcomeOf } from "./audit-store.js";

const READS = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * Body fields a summary may carry: what the change is about, short scalars only. Callback URLs, artifact
 * sources, checksums and upstream lists stay out (they can hold credentials or be long); a list says only
 * how many items it had.
 */
const SUMMARY_FIELDS = new Set([
  "domain",
  "strategy",
  "terminal",
  "change_id",
  "update_type",
  "auto_reboot",
  "update_process_id",
  "version",
]);
const COUNTED_FIELDS = new Set(["upstreams"]);
const MAX_TEXT = 200;

const scalar = (v: unknown): v is string | number | boolean =>
  (typeof v === "string" && v.length <= MAX_TEXT) || typeof v === "number" || typeof v === "boolean";

/** The operation, its path parameters, and the allowed fields of its body: one line of what was asked. */
export function auditSummary(request: FastifyRequest, withBody: boolean): AuditSummary {
  const schema = request.routeOptions.schema as { operationId?: string } | undefined;
  const summary: AuditSummary = { operation: schema?.operationId ?? null };
  for (const [k, v] of Object.entries((request.params ?? {}) as Record<string, unknown>))
    if (scalar(v)) summary[k] = v;
  const body = withBody ? request.body : undefined;
  if (typeof body === "object" && body !== null && !Array.isArray(body))
    for (const [k, v] of Object.entries(body)) {
      if (SUMMARY_FIELDS.has(k) && scalar(v)) summary[k] = v;
      else if (COUNTED_FIELDS.has(k) && Array.isArray(v)) summary[k] = v.length;
    }
  return summary;
}

/**
 * Records every authenticated request to a route with effects (any method but GET, HEAD, OPTIONS) in the
 * audit trail: begun as soon as its token is known, before its scopes are checked, its body read or its
 * handler run, and the request goes on once the record is committed; its summary completed from the body before validation; its end written when the answer
 * has gone out or the connection closed first. Returns the hook the access control calls after the token.
 */
export function auditMutations(
  app: FastifyInstance,
  audit: AuditLog,
  now: () => number,
): (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  // Each record's id, and the summary it was begun with.
  const begun = new WeakMap<FastifyRequest, { id: number; summary: string }>();
  app.addHook("preValidation", async (request) => {
    const record = begun.get(request);
    if (record === undefined) return;
    const summary = auditSummary(request, true);
    // A body without fields a summary carries (a delete's callback_url, say) leaves the record as it is.
    if (JSON.stringify(summary) !== record.summary) await audit.describe(record.id, summary);
  });
  // Fastify calls this once the answer is sent (inject included); a connection that closes first never gets here.
  app.addHook("onResponse", async (request, reply) => {
    const record = begun.get(request);
    if (record !== undefined) audit.complete(record.id, outcomeOf(reply.statusCode), reply.statusCode);
  });
  return async (request, reply) => {
    if (READS.has(request.method) || !request.principal) return;
    const summary = auditSummary(request, false);
    const record = audit.begin({
      at: new Date(now()),
      token: request.principal.name,
      remoteAddress: request.ip,
      requestId: request.id,
      method: request.method,
      route: request.routeOptions.url ?? "",
      path: request.url.split("?")[0] ?? request.url,
      summary,
    });
    // The connection closed before the answer was all sent (the client went away, or timed out): the
    // handler may still finish the change, but nobody learns its outcome. Watched from now, as the
    // connection may close while the record is being committed.
    reply.raw.once("close", () => {
      if (!reply.raw.writableFinished)
        record.then(
          (id) => audit.complete(id, "aborted", null),
          () => {},
        );
    });
    begun.set(request, { id: await record, summary: JSON.stringify(summary) });
  };
}
