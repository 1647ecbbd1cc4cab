import { Type } from "@sinclair/typebox";
import { BODY_OPTIONAL } from "../http/openapi.js";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import { RouteIdParamsSchema, type RouteWriteRequest } from "./schemas.js";
import type { RouteService } from "./service.js";

/** Where a route is read: the `Location` of a create. */
export const routeLocation = (id: string) => `/v1/proxy/routes/${encodeURIComponent(id)}`;

const RouteRef = Type.Ref("Route");
/** What replace and delete can answer besides success. */
const changeProblems = problemResponses(
  "validation_failed",
  "malformed_body",
  "operator_route_immutable",
  "route_not_found",
  "payload_too_large",
  "unsupported_media_type",
  "proxy_unavailable",
  "proxy_rejected_change",
  "proxy_rollback_failed",
);
export function registerProxyRoutes(app: App, service: RouteService): void {
  app.get(
    "/v1/proxy/routes",
    {
      schema: {
        tags: ["proxy"],
        operationId: "listRoutes",
        summary: "List the routes of the managed Caddy server",
        description:
          "All routes of the managed server in Caddy's order, including routes the agent did not create. `[]` when the server does not exist yet.",
        response: {
          200: jsonContent(Type.Array(RouteRef), "The routes."),
          ...problemResponses("proxy_unavailable"),
        },
      },
    },
    async (_request, reply) => {
      // Caddy's own JSON goes out as it came: re-serialising thousands of routes would cost more than reading them.
      const text = await service.listText();
      return reply.type("application/json").send(text);
    },
  );

  app.post<{ Body: RouteWriteRequest }>(
    "/v1/proxy/routes",
    {
      schema: {
        tags: ["proxy"],
        operationId: "createRoute",
        summary: "Create a route",
        description:
          "Creates a reverse-proxy route for `domain`. The route `@id` is the normalised domain. When `callback_url` is given, a `route_backup` event (previous state null) is sent before the change.",
        body: Type.Ref("RouteWriteRequest"),
        response: {
          201: {
            ...jsonContent(RouteRef, "The route as written to Caddy."),
            headers: {
              location: {
                type: "string",
                description: "Where the route is read: `/v1/proxy/routes/{route_id}`.",
              },
            },
          },
          ...problemResponses(
            "validation_failed",
            "malformed_body",
            "route_exists",
            "payload_too_large",
            "unsupported_media_type",
            "proxy_unavailable",
            "proxy_rejected_change",
          ),
        },
      },
    },
    async (request, reply) => {
      const route = await service.create(request.body);
      return reply
        .code(201)
        .header("location", routeLocation(String(route["@id"])))
        .send(route);
    },
  );

  app.get<{ Params: { route_id: string } }>(
    "/v1/proxy/routes/:route_id",
    {
      schema: {
        tags: ["proxy"],
        operationId: "getRoute",
        summary: "Get one route",
        description:
          "The route `route_id` of the managed server, as Caddy holds it now (a route the agent did not create included).",
        params: RouteIdParamsSchema,
        response: {
          200: jsonContent(RouteRef, "The route."),
          ...problemResponses("route_not_found", "proxy_unavailable"),
        },
      },
    },
    async (request) => service.get(request.params.route_id),
  );

  app.put<{ Body: RouteWriteRequest; Params: { route_id: string } }>(
    "/v1/proxy/routes/:route_id",
    {
      schema: {
        tags: ["proxy"],
        operationId: "replaceRoute",
        summary: "Replace a route",
        description:
          "Fully replaces the route `route_id`; `domain` must derive to the same id. The previous state is captured first and restored when the change fails; with `callback_url` it is also sent as `route_backup`.",
        params: RouteIdParamsSchema,
        body: Type.Ref("RouteWriteRequest"),
        response: {
          200: jsonContent(RouteRef, "The route as written to Caddy."),
          ...changeProblems,
        },
      },
    },
    async (request) => service.replace(request.params.route_id, request.body),
  );

  app.delete<{ Body: { callback_url?: string | null } | undefined; Params: { route_id: string } }>(
    "/v1/proxy/routes/:route_id",
    {
      schema: {
        tags: ["proxy"],
        operationId: "deleteRoute",
        summary: "Delete a route",
        description:
          "Deletes the route `route_id`. The body is optional. The route is captured first and restored when the deletion fails; with `callback_url` it is also sent as `route_backup`.",
        params: RouteIdParamsSchema,
        body: Type.Ref("RouteDeleteRequest"),
        [BODY_OPTIONAL]: true,
        response: {
          204: { description: "Deleted.", type: "null" },
          ...changeProblems,
        },
      },
      // The body is optional: no body means no callback. A body that is there must be an object.
      preValidation: async (request) => {
        if (request.body === undefined) request.body = {};
      },
    },
    async (request, reply) => {
      await service.delete(request.params.route_id, request.body?.callback_url);
      return reply.code(204).send();
    },
  );
}
