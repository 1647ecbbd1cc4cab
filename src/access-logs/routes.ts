import { Type } from "@sinclair/typebox";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import { RouteIdParamsSchema } from "../proxy/schemas.js";
import type { AccessLogService } from "./service.js";

const AccessLogQuerySchema = Type.Object(
  {
    lines: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10_000,
        description: "How many of the newest lines, 1-10,000; default 100.",
      }),
    ),
  },
  { additionalProperties: false },
);

const AccessLogEntrySchema = Type.Object(
  {},
  {
    additionalProperties: true,
    description:
      "One line of the route's log as Caddy wrote it (Caddy's access log entry: `ts`, `logger`, `msg`, `request` with its headers, `status`, `size`, `duration`, `resp_headers`, ...). `Authorization`, `Cookie`, `Set-Cookie` and `Proxy-Authorization` values are `REDACTED`.",
  },
);

const accessLogSchema = {
  tags: ["proxy"],
  operationId: "getRouteAccessLog",
  summary: "Read the newest lines of a route's access log",
  description:
    "The newest `lines` entries of the access log of route `route_id` (written with `access_log: true`), oldest first, newest last: the lines of the file Caddy writes now (after Caddy rolled it, the rolled files hold the older ones; docs/api/proxy-routes.md, Access logs). At most the file's last 2 MiB are read, whatever `lines` asks: when older entries asked for were left out for that, the answer has the header `Hostkeeper-Truncated: true`. `[]` before the route's first request. 404 `access_log_not_found` for a route that writes no access log; 500 `unsafe_file` when the file is a link, a FIFO or another user's (see the agent's log).",
  params: RouteIdParamsSchema,
  querystring: AccessLogQuerySchema,
  response: {
    200: {
      ...jsonContent(Type.Array(AccessLogEntrySchema), "The entries, newest last."),
      headers: {
        "hostkeeper-truncated": {
          type: "string",
          enum: ["true"],
          description:
            "Present when older entries that `lines` asked for were left out: the read stops at 2 MiB.",
        },
      },
    },
    ...problemResponses(
      "validation_failed",
      "route_not_found",
      "access_log_not_found",
      "unsafe_file",
      "proxy_unavailable",
    ),
  },
};

/** `GET /v1/proxy/routes/{route_id}/access-log`: the newest lines of a route's access log. */
export function registerAccessLogRoutes(app: App, service: AccessLogService): void {
  app.get("/v1/proxy/routes/:route_id/access-log", { schema: accessLogSchema }, async (request, reply) => {
    const { entries, cut } = await service.tail(request.params.route_id, request.query.lines ?? 100);
    if (cut) void reply.header("hostkeeper-truncated", "true");
    // The lines as Caddy wrote them (each checked to be a JSON object): parsed and written again, they
    // would cost the agent several times their size.
    return reply.type("application/json; charset=utf-8").send(`[${entries.join(",")}]`);
  });
}
