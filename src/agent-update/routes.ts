import type { DenyList } from "../events/egress.js";
import { callbackUrlError } from "../http/callback-url.js";
import { validationFailed } from "../http/errors.js";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import { RefTo } from "../util/typebox.js";
import { AgentUpdateIdParamsSchema, AgentUpdateRequestSchema, AgentUpdateStatusSchema } from "./schemas.js";
import type { AgentUpdateService } from "./service.js";

export function registerAgentUpdateRoutes(app: App, service: AgentUpdateService, deny: DenyList): void {
  app.post(
    "/v1/agent/update",
    {
      schema: {
        tags: ["agent"],
        operationId: "startAgentUpdate",
        summary: "Update the agent itself",
        description:
          "Downloads this host's package of the agent (`version` from a release source, or a package `url`), checks its minisign signature by a key of `HOSTKEEPER_AGENT_UPDATE_KEYS`, its checksum and its fields, makes sure the running version's package is at hand, then installs it from a transient systemd unit. The new agent must answer ready with the new version within `HOSTKEEPER_AGENT_UPDATE_TIMEOUT_S`; otherwise the previous package is installed again (`rolled_back`). Answers at once; follow it at `links.status` (the agent restarts on the way) or through `agent_update` callbacks. Needs the packaged service.",
        body: RefTo(AgentUpdateRequestSchema),
        response: {
          202: jsonContent(RefTo(AgentUpdateStatusSchema), "Accepted: the update's status (`downloading`)."),
          ...problemResponses(
            "validation_failed",
            "malformed_body",
            "update_in_progress",
            "agent_update_unsupported",
            "agent_update_not_configured",
            "payload_too_large",
            "unsupported_media_type",
          ),
        },
      },
    },
    async (request, reply) => {
      const error = callbackUrlError(request.body.callback_url, deny);
      if (error !== undefined) throw validationFailed([error]);
      const status = await service.request(request.body);
      return reply.code(202).header("location", status.links.status).send(status);
    },
  );

  app.get(
    "/v1/agent/update/:id",
    {
      schema: {
        tags: ["agent"],
        operationId: "getAgentUpdate",
        summary: "Get the status of an agent update",
        description:
          "State, download progress, the versions from and to, the signature that authenticated the package, the history of states with their times, and for a failure or rollback the error code and message. Kept across the agent's restart.",
        params: AgentUpdateIdParamsSchema,
        response: {
          200: jsonContent(RefTo(AgentUpdateStatusSchema), "The update's status."),
          ...problemResponses("agent_update_not_found"),
        },
      },
    },
    async (request) => service.status(request.params.id),
  );
}
