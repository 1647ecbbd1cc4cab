import type { DenyList } from "../events/egress.js";
import { callbackUrlError } from "../http/callback-url.js";
import { bodyFieldErrors, type FieldError, validationFailed } from "../http/errors.js";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import { RefTo } from "../util/typebox.js";
import {
  OperatorUpdateRequestSchema,
  RunningInstanceSchema,
  UpdateIdParamsSchema,
  UpdateStatusSchema,
} from "./schemas.js";
import type { OperatorService } from "./service.js";

export function registerOperatorRoutes(app: App, service: OperatorService, deny: DenyList): void {
  app.post(
    "/v1/operator/update",
    {
      schema: {
        tags: ["operator"],
        operationId: "startOperatorUpdate",
        summary: "Start an operator update",
        description:
          "Downloads `<artifact_source>/<version>/<artifact name>`, verifies its SHA-256, starts it in the idle slot, switches the operator's route to it once healthy, and stops the old instance after the drain time; any failure leaves or puts the previous instance back in service. Answers at once with the status; follow it at `links.status` or through the `operator_update` callbacks. Repeating a request with the same id and body answers its current status.",
        body: RefTo(OperatorUpdateRequestSchema),
        response: {
          202: jsonContent(
            RefTo(UpdateStatusSchema),
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
      // Every bad field in one answer, and nothing started for a request that has one.
      const errors: FieldError[] = [
        callbackUrlError(request.body.callback_url, deny),
        ...bodyFieldErrors(service.inputIssues(request.body)),
      ].filter((e) => e !== undefined);
      if (errors.length > 0) throw validationFailed(errors);
      const status = service.request(request.body);
      return reply.code(202).header("location", status.links.status).send(status);
    },
  );

  app.get(
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
          200: jsonContent(RefTo(UpdateStatusSchema), "The update's status."),
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
          200: jsonContent(RefTo(RunningInstanceSchema), "The active, healthy instance."),
          ...problemResponses("running_instance_unavailable"),
        },
      },
    },
    async () => service.runningInstance(),
  );
}
