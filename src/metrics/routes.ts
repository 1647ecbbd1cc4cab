import type { App } from "../http/types.js";
import type { Metrics } from "./metrics.js";

/**
 * `GET /metrics` in the Prometheus text format. It needs the token like every route (nothing marks it
 * public), so a scraper sends it with `authorization.credentials_file`. Left out of the OpenAPI document like
 * the probes: its body is not JSON and no API client calls it; docs/logs-and-metrics.md documents it.
 */
export function registerMetricsRoutes(app: App, metrics: Metrics): void {
  app.get(
    "/metrics",
    { schema: { hide: true }, config: { scopes: ["system:read"] } },
    async (_request, reply) => {
      const text = await metrics.exposition();
      return reply.type(metrics.contentType).send(text);
    },
  );
}
