import { Type } from "@sinclair/typebox";
import { StringEnum } from "../util/typebox.js";
import { EVENT_STATES, EVENT_TYPES } from "./event-kinds.js";

const nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T, description?: string) =>
  Type.Union([schema, Type.Null()], description === undefined ? {} : { description });

export const EventAttemptSchema = Type.Object(
  {
    attempt: Type.Integer({
      minimum: 1,
      description: "1 for the first attempt; numbering goes on across redeliveries.",
    }),
    started_at: Type.String({ format: "date-time" }),
    duration_ms: Type.Integer({ minimum: 0 }),
    status_code: nullable(Type.Integer(), "The receiver's HTTP status; null when none came."),
    error: nullable(
      Type.String(),
      "Why the attempt failed (`HTTP 503: ...`, a connection error, a time-out); null for a 2xx.",
    ),
  },
  { additionalProperties: false, $id: "EventAttempt", title: "EventAttempt" },
);

export const OutboxEventSchema = Type.Object(
  {
    id: Type.String({ description: "The event's id, sent as `webhook-id` on every attempt: `msg_<uuid>`." }),
    type: Type.String({
      description: "`route_backup`, `route_change`, `operator_update`, `system_update` or `agent_update`.",
    }),
    url: Type.String({ description: "The callback URL the event is sent to." }),
    state: StringEnum(EVENT_STATES, {
      description:
        "`pending`: to be attempted (at `next_attempt_at`); `delivered`: a 2xx came; `dead`: the retry schedule ran out or the receiver answered 410.",
    }),
    ordering_key: nullable(
      Type.String(),
      "Events with the same key are delivered one at a time, in the order written (per route and callback URL for route events, per update for operator updates, per apply for system updates).",
    ),
    created_at: Type.String({ format: "date-time" }),
    next_attempt_at: nullable(
      Type.String({ format: "date-time" }),
      "When the next attempt is due; null unless pending.",
    ),
    delivered_at: nullable(Type.String({ format: "date-time" })),
    redelivered_at: nullable(
      Type.String({ format: "date-time" }),
      "When `POST /v1/events/{id}/redeliver` last sent the event out again; null if never.",
    ),
    last_error: nullable(Type.String(), "The error of the latest failed attempt."),
    attempt_count: Type.Integer({ minimum: 0 }),
    attempts: Type.Array(Type.Ref("EventAttempt"), { description: "Every attempt, oldest first." }),
    payload: Type.Object(
      {
        type: Type.String(),
        timestamp: Type.String({ format: "date-time" }),
        data: Type.Object({}, { additionalProperties: true }),
      },
      {
        additionalProperties: true,
        description: "The JSON body sent to the receiver, as signed (the same on every attempt).",
      },
    ),
  },
  { additionalProperties: false, $id: "OutboxEvent", title: "OutboxEvent" },
);

export const EventListSchema = Type.Object(
  { events: Type.Array(Type.Ref("OutboxEvent")) },
  { additionalProperties: false, $id: "EventList", title: "EventList" },
);

export const EventListQuerySchema = Type.Object(
  {
    state: Type.Optional(StringEnum(EVENT_STATES, { description: "Only events in this state." })),
    type: Type.Optional(StringEnum(EVENT_TYPES, { description: "Only events of this type." })),
    limit: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 500, description: "How many events to list, 1-500; default 50." }),
    ),
  },
  { additionalProperties: false },
);

export const EventIdParamsSchema = Type.Object(
  {
    event_id: Type.String({
      minLength: 1,
      maxLength: 128,
      description: "The event's id (`webhook-id`), `msg_<uuid>`.",
    }),
  },
  { additionalProperties: false },
);

export const eventSharedSchemas = [EventAttemptSchema, OutboxEventSchema, EventListSchema];
