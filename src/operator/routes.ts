import { Type } from "@sinclair/typebox";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import { type OperatorUpdateRequest, UpdateIdParamsSchema } from "./schemas.js";
import type { OperatorService } from "./service.js";

export function registerOperatorRoutes(app: App, service: OperatorService): void {
  app.post<{ Body: OperatorUpdateRequest }>(
    "/v1/operator/update",
    {
      schema: {
        tags: ["operator"],
        operationId: "startOperatorUpdate",
        summary: "Start an operator update",
        description:
          "Downloads `<artifact_source>/<version>/<artifact name>`, verifies its SHA-256, starts it in the idle slot, switches the operator's route to it once healthy, and stops the old instance after the drain time; any failure leaves or puts the previous instance back in service. Answers at once with the status; follow it at `links.status` or through the `operator_update` callbacks. Repeating a request with the same id and body answers its current status.",
        body: Type.Ref("OperatorUpdateRequest"),
        response: {
          202: jsonContent(
            Type.Ref("OperatorUpdateStatus"),
            "Accepted: the update's status (`queued` for a new one).",
          ),
          ...problemResponses(
            "validation_failed",
            "malformed_body",
            "update_in_progress",
            "update_id_conflict",
            "payload_too_large",
            "unsupported_media_type",
            "operator_not_configured",
          ),
        },
      },
    },
    async (request, reply) => {
      const status = service.request(request.body);
      return reply.code(202).header("location", status.links.status).send(status);
    },
  );

  app.get<{ Params: { update_process_id: string } }>(
    "/v1/operator/update/:update_process_id",
    {
      schema: {
        tags: ["operator"],
        operationId: "getOperatorUpdate",
        summary: "Get the status of an operator update",
        description:
          "State, download progress, the previous and new instance, the history of states with their times, and for a failure or rollback the error code and message.",
        params: UpdateIdParamsSchema,
        response: {
          200: jsonContent(Type.Ref("OperatorUpdateStatus"), "The update's status."),
          ...problemResponses("update_not_found"),
        },
      },
    },
    async (request) => service.status(request.params.update_process_id),
  );

  app.get(
    "/v1/operator/running-instance",
    {
      schema: {
        tags: ["operator"],
        operationId: "getRunningInstance",
        summary: "Get the active operator instance",
        description:
          "The instance the operator's route points at, checked live against its health path. 503 when none is installed, running or healthy.",
        response: {
          200: jsonContent(Type.Ref("OperatorRunningInstance"), "The active, healthy instance."),
          ...problemResponses("running_instance_unavailable"),
        },
      },
    },
    async () => service.runningInstance(),
  );
}
