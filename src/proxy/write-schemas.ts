import { type Static, Type } from "@sinclair/typebox";
import { NullableString, RefTo, StringEnum } from "../util/typebox.js";

/*
 * A route write request: a domain, its upstreams, and the optional per-site policies (docs/api/proxy-routes.md,
 * Site policies). The shapes and sizes are checked here; what a shape cannot say (hosts that normalise,
 * prefixes, bcrypt hashes, header names, addresses) is checked by `routeIssues` before anything is written.
 */

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

const Upstreams = () => Type.Array(RefTo(UpstreamSchema), { minItems: 1, maxItems: 64 });

export const STRATEGIES = ["first", "weighted_round_robin"] as const;

const strategyField = () =>
  Type.Optional(StringEnum(STRATEGIES, { description: "Load-balancing selection policy; default `first`." }));

export const PathRouteSchema = Type.Object(
  {
    prefix: Type.String({
      minLength: 2,
      maxLength: 256,
      description:
        "Path prefix, matched like Caddy's `path` matcher (case-insensitive, on the cleaned path): it takes the path equal to it and every path below it (`/api` takes `/api` and `/api/x`, never `/apix`). Starts with `/`, no trailing `/`, no `//`, no `.` or `..` segment; letters, digits and `-._~!$&'()+,;=:@/` only.",
      examples: ["/api"],
    }),
    upstreams: Upstreams(),
    strategy: strategyField(),
    strip_prefix: Type.Optional(
      Type.Boolean({
        description: "Send the path without the prefix (`/api/x` -> `/x`, `/api` -> `/`); default false.",
      }),
    ),
  },
  { additionalProperties: false, $id: "PathRoute", title: "PathRoute" },
);

export const BasicAuthUserSchema = Type.Object(
  {
    username: Type.String({ minLength: 1, maxLength: 128, description: "No `:` and no control characters." }),
    password_hash: Type.String({
      minLength: 1,
      maxLength: 128,
      description:
        "A bcrypt hash (`$2a$`, `$2b$` or `$2y$`) of cost 4-14, the same cost for every user of the route: credentials that name no user are checked against a decoy of that cost (docs/api/proxy-routes.md, Basic auth: unknown users and CPU). A plain password is refused, and never stored or logged.",
    }),
  },
  { additionalProperties: false, $id: "BasicAuthUser", title: "BasicAuthUser" },
);

export const BasicAuthSchema = Type.Object(
  {
    realm: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 128,
        pattern: "^[ !#-\\[\\]-~]+$",
        description: "Printable ASCII without `\"` or `\\`; default: the route's domain.",
      }),
    ),
    users: Type.Array(RefTo(BasicAuthUserSchema), { minItems: 1, maxItems: 100 }),
  },
  { additionalProperties: false, $id: "BasicAuth", title: "BasicAuth" },
);

export const HeaderOpsSchema = Type.Object(
  {
    set: Type.Optional(
      Type.Record(Type.String(), Type.String({ maxLength: 4096 }), {
        description: "Header name to value; the value is sent exactly as given.",
      }),
    ),
    delete: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 256 }), { maxItems: 64 })),
  },
  { additionalProperties: false, $id: "HeaderOps", title: "HeaderOps" },
);

export const HeadersSchema = Type.Object(
  {
    request: Type.Optional(RefTo(HeaderOpsSchema)),
    response: Type.Optional(RefTo(HeaderOpsSchema)),
  },
  {
    additionalProperties: false,
    $id: "Headers",
    title: "Headers",
    description:
      "Request headers as the upstream receives them, response headers as the client does. Names are RFC 9110 tokens without `*`; values at most 4,096 bytes without control characters other than tab; at most 64 entries in all; `Connection`, `Content-Length`, `Transfer-Encoding`, `Upgrade`, `Keep-Alive`, `TE` and `Trailer` are refused.",
  },
);

export const MaintenanceSchema = Type.Object(
  {
    status: Type.Optional(Type.Integer({ minimum: 400, maximum: 599, description: "Default 503." })),
    retry_after: Type.Optional(
      Type.Integer({ minimum: 0, maximum: 86_400, description: "Seconds, sent as `Retry-After`." }),
    ),
    body: Type.Optional(Type.String({ maxLength: 65_536, description: "At most 64 KiB (UTF-8)." })),
    content_type: Type.Optional(
      Type.String({
        minLength: 3,
        maxLength: 128,
        description: "A media type; default `text/html; charset=utf-8`.",
      }),
    ),
  },
  {
    additionalProperties: false,
    $id: "Maintenance",
    title: "Maintenance",
    description: "While present, Caddy answers every request to the route itself; no upstream is asked.",
  },
);

export const CallbackUrlSchema = NullableString(
  Type.String({
    maxLength: 2048,
    description:
      "Absolute http(s) URL that receives the `route_backup` event before the change is applied; `hostkeeper:connection`: over the connection to the control plane (docs/connect.md).",
  }),
);

export const RouteWriteRequestSchema = Type.Object(
  {
    domain: Type.String({
      minLength: 1,
      maxLength: 512,
      description:
        "Host the route matches. `*.` as the first label makes a wildcard. It is normalised to the route `@id` (see docs/api/proxy-routes.md, Route ids): at most 253 characters once in ASCII, plus `*.` for a wildcard.",
    }),
    upstreams: Upstreams(),
    callback_url: Type.Optional(CallbackUrlSchema),
    strategy: strategyField(),
    terminal: Type.Optional(Type.Boolean({ description: "Whether the route is terminal; default `true`." })),
    redirect_from: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 512 }), {
        minItems: 1,
        maxItems: 16,
        description:
          "More hosts (normalised like `domain`, no wildcards) that answer every request with a redirect to the route's domain, keeping the request's scheme, path and query.",
      }),
    ),
    redirect_status: Type.Optional(
      Type.Union([Type.Literal(301), Type.Literal(302), Type.Literal(307), Type.Literal(308)], {
        description: "Status of the `redirect_from` redirects; default 308. Only with `redirect_from`.",
      }),
    ),
    paths: Type.Optional(
      Type.Array(RefTo(PathRouteSchema), {
        minItems: 1,
        maxItems: 64,
        description:
          "Prefixes sent to other upstreams: the longest prefix that takes the path wins; any other path goes to the route's own `upstreams`.",
      }),
    ),
    basic_auth: Type.Optional(RefTo(BasicAuthSchema)),
    allow_ips: Type.Optional(
      Type.Array(Type.String({ minLength: 2, maxLength: 64 }), {
        minItems: 1,
        maxItems: 256,
        description:
          "IPv4/IPv6 addresses or CIDR ranges; a request from any other client address (Caddy's `client_ip`) gets 403.",
      }),
    ),
    headers: Type.Optional(RefTo(HeadersSchema)),
    maintenance: Type.Optional(RefTo(MaintenanceSchema)),
    encode: Type.Optional(
      Type.Array(StringEnum(["zstd", "gzip"]), {
        minItems: 1,
        maxItems: 2,
        uniqueItems: true,
        description: "Compress responses for clients that accept it, in this order of preference.",
      }),
    ),
    access_log: Type.Optional(
      Type.Boolean({
        description:
          "Caddy writes every request the route handles (its domain and `redirect_from` hosts) as a JSON line to a file of the route's own, read with `GET /v1/proxy/routes/{route_id}/access-log` (docs/api/proxy-routes.md, Access logs). Default false: no log.",
      }),
    ),
    https_redirect: Type.Optional(
      Type.Boolean({
        description:
          "Whether a plain-HTTP request for the route's hosts (its domain and `redirect_from` hosts) is answered 308 to HTTPS (docs/https.md, Redirects). Default true, which applies whenever the managed server serves TLS; false serves the route on plain HTTP as well, for sites that must answer there. Read back only when false.",
      }),
    ),
  },
  { additionalProperties: false, $id: "RouteWriteRequest", title: "RouteWriteRequest" },
);

export type RouteWriteRequest = Static<typeof RouteWriteRequestSchema>;
export type PathRoute = Static<typeof PathRouteSchema>;
export type BasicAuth = Static<typeof BasicAuthSchema>;
export type HeaderOps = Static<typeof HeaderOpsSchema>;
export type Headers = Static<typeof HeadersSchema>;
export type Maintenance = Static<typeof MaintenanceSchema>;
export type Encoding = "zstd" | "gzip";
