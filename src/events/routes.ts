import { Type } from "@sinclair/typebox";
import { ApiError } from "../http/errors.js";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import type { Outbox } from "./outbox.js";
import { EventIdParamsSchema, EventListQuerySchema, eventSharedSchemas } from "./schemas.js";
import type { OutboxAttempt, OutboxEvent } from "./store.js";

/** An outbox row as the API shows it: times as ISO strings, the body as JSON, the attempts inline. */
function eventView(event: OutboxEvent, attempts: OutboxAttempt[]) {
  return {
    id: event.id,
    type: event.type,
    url: event.url,
    state: event.state,
    ordering_key: event.ordering_key,
    created_at: event.created_at,
    next_attempt_at: event.state === "pending" ? new Date(event.next_attempt_at).toISOString() : null,
    delivered_at: event.delivered_at,
    redelivered_at: event.redelivered_at,
    last_error: event.last_error,
    attempt_count: event.attempts,
    attempts,
    payload: JSON.parse(event.payload) as Record<string, unknown>,
  };
}

export function registerEventRoutes(app: App, outbox: Outbox): void {
  for (const s of eventSharedSchemas) app.addSchema(s);

  app.get(
    "/v1/events",
    {
      // The outbox holds the four areas' callbacks (routes', operator updates', applies', agent updates'),
      // bodies included.
      config: { scopes: ["proxy:read", "operator:read", "system:read", "agent:read"] },
      schema: {
        tags: ["events"],
        operationId: "listEvents",
        summary: "List callback events and their delivery attempts",
        description:
          "The events of the durable outbox (`route_backup`, `route_change`, `operator_update`, `system_update`, `agent_update`), newest first, each with its body and every delivery attempt. Filter by `state` and `type`; at most `limit` events (default 50, at most 500). A token without `proxy:write` reads each basic-auth hash in the bodies as `<redacted>`; the callbacks carry the real ones.",
        querystring: EventListQuerySchema,
        response: {
          200: jsonContent(Type.Ref("EventList"), "The events."),
          ...problemResponses("validation_failed"),
        },
      },
    },
    async (request) => {
      const { state, type, limit } = request.query;
      const rows = outbox.list({ state, type, limit: limit ?? 50 });
      return { events: rows.map(({ event, attempts }) => eventView(event, attempts)) };
    },
  );

  app.post(
    "/v1/events/:event_id/redeliver",
    {
      config: { scopes: ["proxy:write", "operator:write", "system:write", "agent:write"] },
      schema: {
        tags: ["events"],
        operationId: "redeliverEvent",
        summary: "Send a delivered or dead event again",
        description:
          "Puts the event back to `pending` with the whole retry schedule ahead of it; the next attempt starts at once. It goes out with the same `webhook-id` and body (a new `webhook-timestamp` and signature per attempt), after any earlier pending event of its ordering key. Its earlier attempts stay listed. An event still pending is 409: it is on its schedule already. Request body: none.",
        params: EventIdParamsSchema,
        response: {
          202: jsonContent(Type.Ref("OutboxEvent"), "Accepted: the event, pending again."),
          ...problemResponses("event_not_found", "event_pending"),
        },
      },
    },
    async (request, reply) => {
      const id = request.params.event_id;
      const r = outbox.redeliver(id);
      if (!r.ok && r.reason === "not_found")
        throw new ApiError("event_not_found", `no event has the id ${id}`);
      if (!r.ok)
        throw new ApiError(
          "event_pending",
          `event ${id} is still pending (next attempt on its retry schedule); only a delivered or dead event can be sent again`,
        );
      const attempts = outbox.attempts(id);
      request.log.info(
        { event_id: id, type: r.event.type, attempts: attempts.length, request_id: request.id },
        `event ${id}: redelivery requested`,
      );
      return reply.code(202).send(eventView(r.event, attempts));
    },
  );
}
