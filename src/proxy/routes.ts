import { Type } from "@sinclair/typebox";
import type { FastifyRequest } from "fastify";
import type { DenyList } from "../events/egress.js";
import { callbackUrlError } from "../http/callback-url.js";
import { bodyFieldErrors, type ProblemCode, validationFailed } from "../http/errors.js";
import { BODY_OPTIONAL } from "../http/openapi.js";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import { RefTo } from "../util/typebox.js";
import { routeIssues } from "./route/build-route.js";
import {
  RouteDeleteRequestSchema,
  RouteHistoryQuerySchema,
  RouteIdParamsSchema,
  RouteRestoreRequestSchema,
  type RouteWriteRequest,
  RouteWriteRequestSchema,
} from "./schemas.js";
import type { ChangeContext, RouteService } from "./service.js";

/** Where a route is read: the `Location` of a create. */
export const routeLocation = (id: string) => `/v1/proxy/routes/${encodeURIComponent(id)}`;

const RouteRef = Type.Ref("Route");
const TAGS = ["proxy"];

/** What replace and delete can answer besides success. */
const changeCodes: ProblemCode[] = [
  "validation_failed",
  "malformed_body",
  "operator_route_immutable",
  "agent_route_immutable",
  "route_not_found",
  "host_conflict",
  "payload_too_large",
  "unsupported_media_type",
  "proxy_unavailable",
  "proxy_rejected_change",
  "proxy_rollback_failed",
];

const listSchema = {
  tags: TAGS,
  operationId: "listRoutes",
  summary: "List the routes of the managed Caddy server",
  description:
    "All routes of the managed server in Caddy's order, including routes the agent did not create. `[]` when the server does not exist yet. A token without `proxy:write` reads each basic-auth hash as `<redacted>`.",
  response: {
    200: jsonContent(Type.Array(RouteRef), "The routes."),
    ...problemResponses("proxy_unavailable"),
  },
};

const createSchema = {
  tags: TAGS,
  operationId: "createRoute",
  summary: "Create a route",
  description:
    "Creates a reverse-proxy route for `domain`, with the site policies the request asks for (docs/api/proxy-routes.md). The route `@id` is the normalised domain. 409 `route_exists` when the id is in use in Caddy's config; 409 `host_conflict` when another route serves the domain or a `redirect_from` host; 409 `operator_domain_reserved` when the domain (a wildcard) or a `redirect_from` host covers the operator's domain. When `callback_url` is given, a `route_backup` event (previous state null) is sent before the change. 400 naming the field when an upstream reaches an address of `HOSTKEEPER_UPSTREAM_DENY_CIDRS` or one of the agent's own ports (its API, Caddy's admin endpoint, the operator's instances), a host name by what it resolves to now.",
  body: RefTo(RouteWriteRequestSchema),
  response: {
    201: {
      ...jsonContent(RouteRef, "The route as written to Caddy."),
      headers: {
        location: { type: "string", description: "Where the route is read: `/v1/proxy/routes/{route_id}`." },
      },
    },
    ...problemResponses(
      "validation_failed",
      "malformed_body",
      "route_exists",
      "host_conflict",
      "operator_domain_reserved",
      "payload_too_large",
      "unsupported_media_type",
      "proxy_unavailable",
      "proxy_rejected_change",
    ),
  },
};

const getSchema = {
  tags: TAGS,
  operationId: "getRoute",
  summary: "Get one route",
  description:
    "The route `route_id` of the managed server, as Caddy holds it now (a route the agent did not create included). A token without `proxy:write` reads each basic-auth hash as `<redacted>`.",
  params: RouteIdParamsSchema,
  response: {
    200: jsonContent(RouteRef, "The route."),
    ...problemResponses("route_not_found", "proxy_unavailable"),
  },
};

const requestSchema = {
  tags: TAGS,
  operationId: "getRouteRequest",
  summary: "Get the write request that makes a route",
  description:
    "The route `route_id` in the shape it was written (a create's or replace's body, without `callback_url`), read from the route Caddy holds now: the request that makes exactly that route, in its normalised form (the domain and hosts as route ids, defaults filled in, paths longest prefix first). 409 `route_request_unknown` for a route no write request makes: one written outside the agent's API, or changed in Caddy since. A token without `proxy:write` reads each basic-auth hash as `<redacted>`.",
  params: RouteIdParamsSchema,
  response: {
    200: jsonContent(Type.Ref("WrittenRouteRequest"), "The write request."),
    ...problemResponses("route_not_found", "route_request_unknown", "proxy_unavailable"),
  },
};

const historySchema = {
  tags: TAGS,
  operationId: "getRouteHistory",
  summary: "List the changes recorded for a route",
  description:
    "Every change the agent made to the route (create, replace, delete, restore, and its own writes of the operator's route), newest first: when, by which request (`x-request-id`), with what outcome, the state it captured before Caddy was touched, what it wrote, and the ids of its callback events. At most `limit` (default 50). 404 when no change is recorded and the managed server has no such route; Caddy is asked only then. A token without `proxy:write` reads each basic-auth hash as `<redacted>`.",
  params: RouteIdParamsSchema,
  querystring: RouteHistoryQuerySchema,
  response: {
    200: jsonContent(Type.Ref("RouteHistory"), "The changes, newest first."),
    ...problemResponses("validation_failed", "route_not_found", "proxy_unavailable"),
  },
};

const restoreSchema = {
  tags: TAGS,
  operationId: "restoreRoute",
  summary: "Put back the state a change captured",
  description:
    "Puts back the route state captured by the change `change_id` of this route, as a change of its own (in the history, with its own backup and, with `callback_url`, its own `route_backup` and `route_change` events). The change decides what happens: one that created the route (no previous state) is undone by removing the route; one that deleted it, by creating the captured route again; one that replaced it, by replacing the current route with the captured one. 409 when that does not fit the route as it is now: removing or replacing a route the managed server no longer has, or re-creating one whose `@id` is in use in Caddy's config again; 409 `operator_domain_reserved` when the captured route would take requests for the operator's domain. 404 when the route has no recorded change or `change_id` is not one of its changes; 403 for the operator's route; 400 naming `change_id` when the captured route dials what a write may not (see createRoute).",
  params: RouteIdParamsSchema,
  body: RefTo(RouteRestoreRequestSchema),
  response: {
    200: jsonContent(Type.Ref("RouteRestoreResult"), "What the restore did."),
    ...problemResponses(
      "validation_failed",
      "malformed_body",
      "operator_route_immutable",
      "agent_route_immutable",
      "route_not_found",
      "change_not_found",
      "restore_conflict",
      "operator_domain_reserved",
      "payload_too_large",
      "unsupported_media_type",
      "proxy_unavailable",
      "proxy_rejected_change",
      "proxy_rollback_failed",
    ),
  },
};

const replaceSchema = {
  tags: TAGS,
  operationId: "replaceRoute",
  summary: "Replace a route",
  description:
    "Fully replaces the route `route_id`, site policies included (a field left out is a policy removed); `domain` must derive to the same id. 409 `host_conflict` when another route serves the domain or a `redirect_from` host; 409 `operator_domain_reserved` when the domain (a wildcard) or a `redirect_from` host covers the operator's domain. The previous state is captured first and restored when the change fails; with `callback_url` it is also sent as `route_backup`. 400 naming the field when an upstream reaches an address of `HOSTKEEPER_UPSTREAM_DENY_CIDRS` or one of the agent's own ports (its API, Caddy's admin endpoint, the operator's instances), a host name by what it resolves to now.",
  params: RouteIdParamsSchema,
  body: RefTo(RouteWriteRequestSchema),
  response: {
    200: jsonContent(RouteRef, "The route as written to Caddy."),
    ...problemResponses(...changeCodes, "operator_domain_reserved"),
  },
};

const deleteSchema = {
  tags: TAGS,
  operationId: "deleteRoute",
  summary: "Delete a route",
  description:
    "Deletes the route `route_id`. The body is optional. The route is captured first and restored when the deletion fails; with `callback_url` it is also sent as `route_backup`.",
  params: RouteIdParamsSchema,
  body: RefTo(RouteDeleteRequestSchema),
  [BODY_OPTIONAL]: true,
  response: { 204: { description: "Deleted.", type: "null" }, ...problemResponses(...changeCodes) },
};

/** The request's id (the caller's `x-request-id` when usable, see genReqId): recorded with the change. */
const changeContext = (request: FastifyRequest): ChangeContext => ({ requestId: request.id });

export function registerProxyRoutes(app: App, service: RouteService, deny: DenyList): void {
  /**
   * A callback the agent may not call is refused before anything of the change happens, in one answer with
   * whatever else the request's route gets wrong (`written`, for a create or replace).
   */
  const checkCallback = (url: string | null | undefined, written?: RouteWriteRequest) => {
    const error = callbackUrlError(url, deny);
    if (!error) return;
    const issues = written === undefined ? [] : routeIssues(written);
    throw validationFailed([...bodyFieldErrors(issues), error]);
  };

  // Caddy's own bytes go out as they come: parsing and re-serialising thousands of routes would cost more
  // than reading them, and holding them whole would cost memory per request. (A token without proxy:write
  // gets them through the redactor, redaction-routes.ts, which streams too.)
  app.get("/v1/proxy/routes", { schema: listSchema }, async (_request, reply) =>
    reply.type("application/json").send(await service.list()),
  );

  app.post("/v1/proxy/routes", { schema: createSchema }, async (request, reply) => {
    checkCallback(request.body.callback_url, request.body);
    const route = await service.create(request.body, changeContext(request));
    return reply
      .code(201)
      .header("location", routeLocation(String(route["@id"])))
      .send(route);
  });

  app.get("/v1/proxy/routes/:route_id", { schema: getSchema }, async (request) =>
    service.get(request.params.route_id),
  );

  app.get("/v1/proxy/routes/:route_id/request", { schema: requestSchema }, async (request) =>
    service.request(request.params.route_id),
  );

  app.get("/v1/proxy/routes/:route_id/history", { schema: historySchema }, async (request) => ({
    changes: await service.history(request.params.route_id, request.query.limit ?? 50),
  }));

  app.post("/v1/proxy/routes/:route_id/restore", { schema: restoreSchema }, async (request) => {
    const { change_id, callback_url } = request.body;
    checkCallback(callback_url);
    return service.restore(request.params.route_id, change_id, callback_url, changeContext(request));
  });

  app.put("/v1/proxy/routes/:route_id", { schema: replaceSchema }, async (request) => {
    checkCallback(request.body.callback_url, request.body);
    return service.replace(request.params.route_id, request.body, changeContext(request));
  });

  app.delete(
    "/v1/proxy/routes/:route_id",
    {
      schema: deleteSchema,
      // The body is optional: no body means no callback. A body that is there must be an object.
      preValidation: async (request) => {
        if (request.body === undefined) request.body = {};
      },
    },
    async (request, reply) => {
      const callbackUrl = request.body?.callback_url;
      checkCallback(callbackUrl);
      await service.delete(request.params.route_id, callbackUrl, changeContext(request));
      return reply.code(204).send();
    },
  );
}
