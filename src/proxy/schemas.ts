import { type Static, Type } from "@sinclair/typebox";
import { NullableString, StringEnum } from "../http/schemas.js";

export const UpstreamSchema = Type.Object(
  {
    dial: Type.String({
      minLength: 3,
      maxLength: 300,
      description:
        "`host:port` of the upstream; host is a name, an IPv4 address or a bracketed IPv6 address; port 1-65535.",
      examples: ["127.0.0.1:8080"],
    }),
    weight: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 1_000_000,
        description:
          "Only with strategy `weighted_round_robin` (default 1). The weights of a route must sum to more than 0.",
      }),
    ),
  },
  { additionalProperties: false, $id: "Upstream", title: "Upstream" },
);

export const CallbackUrlSchema = NullableString(
  Type.String({
    maxLength: 2048,
    description: "Absolute http(s) URL that receives the `route_backup` event before the change is applied.",
  }),
);

export const RouteWriteRequestSchema = Type.Object(
  {
    domain: Type.String({
      minLength: 1,
      maxLength: 512,
      description:
        "Host the route matches. `*.` as the first label makes a wildcard. It is normalised to the route `@id` (see the README): at most 253 characters once in ASCII, plus `*.` for a wildcard.",
    }),
    upstreams: Type.Array(Type.Ref("Upstream"), { minItems: 1, maxItems: 64 }),
    callback_url: Type.Optional(CallbackUrlSchema),
    strategy: Type.Optional(
      StringEnum(["first", "weighted_round_robin"], {
        description: "Load-balancing selection policy; default `first`.",
      }),
    ),
    terminal: Type.Optional(Type.Boolean({ description: "Whether the route is terminal; default `true`." })),
  },
  { additionalProperties: false, $id: "RouteWriteRequest", title: "RouteWriteRequest" },
);

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
      "A Caddy matcher set. Routes written by the agent use `host` alone; other routes may carry any Caddy matcher.",
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
      "A Caddy handler. Routes written by the agent hold one `reverse_proxy` handler with `upstreams` (`[{dial}]`) and `load_balancing.selection_policy` (`{policy: first}` or `{policy: weighted_round_robin, weights: [...]}`).",
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

export const proxySharedSchemas = [
  UpstreamSchema,
  RouteMatchSchema,
  RouteHandleSchema,
  RouteSchema,
  RouteWriteRequestSchema,
  RouteDeleteRequestSchema,
];

export type Upstream = Static<typeof UpstreamSchema>;
export type RouteWriteRequest = {
  domain: string;
  upstreams: Upstream[];
  callback_url?: string | null;
  strategy?: "first" | "weighted_round_robin";
  terminal?: boolean;
};
