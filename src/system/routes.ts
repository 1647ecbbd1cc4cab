import { Type } from "@sinclair/typebox";
import type { FastifyRequest } from "fastify";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import { ApplyHistoryQuerySchema, type ApplyUpdatesRequest, systemSharedSchemas } from "./schemas.js";
import type { SystemService } from "./service.js";

export function registerSystemRoutes(app: App, service: SystemService): void {
  for (const s of systemSharedSchemas) app.addSchema(s);
  /** Applies whose response schedules a reboot; the reboot's delay starts once that response is sent. */
  const rebootAfterResponse = new WeakSet<FastifyRequest>();

  app.post(
    "/v1/system/check-updates",
    {
      schema: {
        tags: ["system"],
        operationId: "checkUpdates",
        summary: "Check for system package updates",
        description:
          "Refreshes the package lists (a failure to fetch any of them is an error), then reports the available updates and whether a reboot is required. Waits while another apply of this agent or another program holds the package manager, up to `HOSTKEEPER_PACKAGE_LOCK_TIMEOUT_MS`. Request body: none.",
        response: {
          200: jsonContent(Type.Ref("System"), "The System object, with the details of each update."),
          ...problemResponses("package_manager_busy", "package_manager_failed"),
        },
      },
    },
    async () => service.check(),
  );

  app.post<{ Body: ApplyUpdatesRequest }>(
    "/v1/system/apply-updates",
    {
      schema: {
        tags: ["system"],
        operationId: "applyUpdates",
        summary: "Apply system package updates",
        description:
          "Installs the updates of `update_type` non-interactively, keeping configuration files the administrator changed, and never upgrading a package of `HOSTKEEPER_HOLD_PACKAGES`. The answer says what changed and what was held back. Every apply, failed or not, is recorded in the apply history.",
        body: Type.Ref("ApplyUpdatesRequest"),
        response: {
          200: jsonContent(Type.Ref("ApplyResult"), "What the apply changed."),
          ...problemResponses(
            "validation_failed",
            "malformed_body",
            "payload_too_large",
            "unsupported_media_type",
            "package_manager_busy",
            "package_manager_failed",
          ),
        },
      },
      onResponse: async (request) => {
        if (rebootAfterResponse.has(request)) service.startScheduledReboot();
      },
    },
    async (request) => {
      const userAgent = request.headers["user-agent"];
      const result = await service.apply(request.body.update_type, request.body.auto_reboot ?? false, {
        remote_address: request.ip,
        user_agent: userAgent ?? null,
        request_id: request.id,
      });
      if (result.reboot_scheduled) rebootAfterResponse.add(request);
      return result;
    },
  );

  app.get<{ Querystring: { limit?: string } }>(
    "/v1/system/apply-history",
    {
      schema: {
        tags: ["system"],
        operationId: "listApplyHistory",
        summary: "List past applies",
        description:
          "Every apply-updates call, newest first: who asked (remote address, user agent, request id), the update type, the outcome or error, what changed, and how long it took.",
        querystring: ApplyHistoryQuerySchema,
        response: {
          200: jsonContent(Type.Ref("ApplyHistory"), "The applies."),
          ...problemResponses("validation_failed"),
        },
      },
    },
    async (request) => ({ applies: service.history(Number(request.query.limit ?? 50)) }),
  );
}
