import { type Static, Type } from "@sinclair/typebox";
import { StringEnum } from "../util/typebox.js";
import {
  BasicAuthSchema,
  BasicAuthUserSchema,
  CallbackUrlSchema,
  HeaderOpsSchema,
  HeadersSchema,
  MaintenanceSchema,
  PathRouteSchema,
  RouteWriteRequestSchema,
  UpstreamSchema,
} from "./write-schemas.js";

export type { RouteWriteRequest } from "./write-schemas.js";
export { CallbackUrlSchema, RouteWriteRequestSchema, UpstreamSchema } from "./write-schemas.js";

export const WrittenRouteRequestSchema = Type.Omit(RouteWriteRequestSchema, ["callback_url"], {
  additionalProperties: false,
  $id: "WrittenRouteRequest",
  title: "WrittenRouteRequest",
  description: "A route write request without `callback_url`, in its normalised form.",
});

export const RouteDeleteRequestSchema = Type.Object(
  { callback_url: Type.Optional(CallbackUrlSchema) },
  { additionalProperties: false, $id: "RouteDeleteRequest", title: "RouteDeleteRequest" },
);

export const RouteMatchSchema = Type.Object(
  { host: Type.Optional(Type.Array(Type.String())) },
  {
    additionalProperties: true,
    $id: "RouteMatch",
    title: "RouteMatch",
    description:
      "A Caddy matcher set. Routes written by the agent use `host` alone (the domain, then the `redirect_from` hosts); other routes may carry any Caddy matcher.",
  },
);

export const RouteHandleSchema = Type.Object(
  {
    handler: Type.String({
      description: "Caddy handler module, `reverse_proxy` for routes written by the agent.",
    }),
  },
  {
    additionalProperties: true,
    $id: "RouteHandle",
    title: "RouteHandle",
    description:
      "A Caddy handler. Routes written by the agent hold one `reverse_proxy` handler with `upstreams` (`[{dial}]`) and `load_balancing.selection_policy` (`{policy: first}` or `{policy: weighted_round_robin, weights: [...]}`), and `stream_close_delay` (a Caddy duration such as `2m`) unless that setting is 0. A route with site policies holds one `subroute` handler instead, whose routes hold the policies and every `reverse_proxy` (docs/api/proxy-routes.md, Site policies).",
  },
);

export const RouteSchema = Type.Object(
  {
    "@id": Type.Optional(Type.String()),
    match: Type.Optional(Type.Array(Type.Ref("RouteMatch"))),
    handle: Type.Optional(Type.Array(Type.Ref("RouteHandle"))),
    terminal: Type.Optional(Type.Boolean()),
  },
  {
    additionalProperties: true,
    $id: "Route",
    title: "Route",
    description: "A route of the managed Caddy server, as Caddy holds it.",
  },
);

export const RouteIdParamsSchema = Type.Object(
  {
    route_id: Type.String({
      minLength: 1,
      maxLength: 256,
      description: "The route `@id` (up to 256 characters: a 253-character domain, or a wildcard of one).",
    }),
  },
  { additionalProperties: false },
);

export const RouteHistoryQuerySchema = Type.Object(
  {
    limit: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 1000,
        description: "How many changes to list, 1-1000; default 50.",
      }),
    ),
  },
  { additionalProperties: false },
);

export const CHANGE_OPERATIONS = ["create", "replace", "delete", "restore", "put"] as const;
export const CHANGE_OUTCOMES = [
  "pending",
  "interrupted",
  "applied",
  "refused",
  "failed",
  "rolled_back",
  "rollback_failed",
] as const;

const RouteOrNull = (description: string) => Type.Union([Type.Ref("Route"), Type.Null()], { description });
const IntegerOrNull = (description: string) => Type.Union([Type.Integer(), Type.Null()], { description });
const StringOrNull = (description: string, format?: string) =>
  Type.Union([Type.String(format === undefined ? {} : { format }), Type.Null()], { description });

export const RouteChangeSchema = Type.Object(
  {
    change_id: Type.Integer({ minimum: 1, description: "The change's id; `change_id` of a restore." }),
    route_id: Type.String(),
    operation: StringEnum(CHANGE_OPERATIONS, {
      description:
        "`create`, `replace`, `delete` and `restore` through the API; `put` when the agent wrote the operator's route itself.",
    }),
    outcome: StringEnum(CHANGE_OUTCOMES, {
      description:
        "`pending`: being applied now; `interrupted`: the agent stopped while applying it (Caddy may or may not hold it); `applied`; `refused`: 404/409 found once the change was under way; `failed`: Caddy unreachable or refusing, nothing changed; `rolled_back`: failed after Caddy may have changed, and the previous state was put back; `rollback_failed`: putting it back failed too.",
    }),
    requested_at: Type.String({ format: "date-time" }),
    finished_at: StringOrNull("Null while pending or interrupted.", "date-time"),
    request_id: StringOrNull(
      "The request id of the request that made the change: its `x-request-id` header when that was usable (1-128 characters of `A-Z a-z 0-9 . _ : / + = @ -`), else the id the agent generated for it; null for changes the agent made itself.",
    ),
    previous_route: RouteOrNull(
      "The route as Caddy held it just before the change (captured before Caddy was touched); null when there was none.",
    ),
    requested_route: RouteOrNull(
      "The route the change wrote, or tried to write; null for a change that removes the route.",
    ),
    restored_from: IntegerOrNull("For a restore, the change whose captured state it put back."),
    error: StringOrNull("Why the change did not apply."),
    backup_event_id: StringOrNull("The `route_backup` event sent for the change (see `GET /v1/events`)."),
    change_event_id: StringOrNull("The `route_change` event sent once the change settled."),
  },
  { additionalProperties: false, $id: "RouteChange", title: "RouteChange" },
);

export const RouteHistorySchema = Type.Object(
  { changes: Type.Array(Type.Ref("RouteChange"), { description: "Newest first." }) },
  { additionalProperties: false, $id: "RouteHistory", title: "RouteHistory" },
);

export const RouteRestoreRequestSchema = Type.Object(
  {
    change_id: Type.Integer({
      minimum: 1,
      maximum: Number.MAX_SAFE_INTEGER,
      description: "The change of this route whose captured previous state is put back (from its history).",
    }),
    callback_url: Type.Optional(CallbackUrlSchema),
  },
  { additionalProperties: false, $id: "RouteRestoreRequest", title: "RouteRestoreRequest" },
);

export const RouteRestoreResultSchema = Type.Object(
  {
    change_id: Type.Integer({ description: "The restore's own change id (in the route's history)." }),
    restored_from: Type.Integer({ description: "The change whose captured state was put back." }),
    action: StringEnum(["recreated", "replaced", "removed"], {
      description:
        "`recreated`: the change had removed the route, which is back; `replaced`: the change had replaced it, and its previous form is back; `removed`: the change had created it, and it is gone.",
    }),
    route: RouteOrNull("The route as written to Caddy; null when the restore removed it."),
  },
  { additionalProperties: false, $id: "RouteRestoreResult", title: "RouteRestoreResult" },
);

export const proxySharedSchemas = [
  UpstreamSchema,
  PathRouteSchema,
  BasicAuthUserSchema,
  BasicAuthSchema,
  HeaderOpsSchema,
  HeadersSchema,
  MaintenanceSchema,
  RouteMatchSchema,
  RouteHandleSchema,
  RouteSchema,
  RouteWriteRequestSchema,
  WrittenRouteRequestSchema,
  RouteDeleteRequestSchema,
  RouteChangeSchema,
  RouteHistorySchema,
  RouteRestoreRequestSchema,
  RouteRestoreResultSchema,
];

export type ChangeOperation = (typeof CHANGE_OPERATIONS)[number];
export type HistoryOutcome = (typeof CHANGE_OUTCOMES)[number];
export type RouteDeleteRequest = Static<typeof RouteDeleteRequestSchema>;
export type RouteRestoreRequest = Static<typeof RouteRestoreRequestSchema>;
export type RouteIdParams = Static<typeof RouteIdParamsSchema>;
export type RouteHistoryQuery = Static<typeof RouteHistoryQuerySchema>;
