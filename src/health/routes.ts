import { Type } from "@sinclair/typebox";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import { healthSharedSchemas } from "./schemas.js";
import type { HealthService } from "./service.js";

/**
 * The probes and the status. `/healthz` and `/readyz` answer without the token (probes run without
 * secrets) and are left out of the OpenAPI document, whose every operation requires it; docs/api/health.md
 * documents them.
 */
export function registerHealthRoutes(app: App, service: HealthService): void {
  for (const s of healthSharedSchemas) app.addSchema(s);

  // Liveness: the process serves HTTP. Nothing else is asked, so a slow Caddy never gets the agent restarted.
  app.get("/healthz", { schema: { hide: true }, config: { public: true } }, async () => ({ status: "ok" }));

  app.get(
    "/readyz",
    {
      schema: {
        hide: true,
        response: { 200: Type.Ref("Readiness"), 503: Type.Ref("Readiness") },
      },
      config: { public: true },
    },
    async (_request, reply) => {
      const readiness = await service.readiness();
      return reply.code(readiness.status === "ready" ? 200 : 503).send(readiness);
    },
  );

  app.get(
    "/v1/status",
    {
      config: { scopes: ["system:read"] },
      schema: {
        tags: ["agent"],
        operationId: "getAgentStatus",
        summary: "Get the agent's status",
        description:
          "Versions (agent, Node, Caddy, package manager), uptime, the Caddy the agent uses (embedded and supervised, or external; PID, state, restarts), the managed server's route count, the callbacks pending and dead, the last successful check for updates, the active operator instance, and the readiness checks. Answers 200 whatever it finds: a Caddy that is down is a state here, not an error.",
        response: {
          200: jsonContent(Type.Ref("AgentStatus"), "The agent's status."),
          ...problemResponses(),
        },
      },
    },
    async () => service.status(),
  );
}
