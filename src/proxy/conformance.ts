import type { Logger } from "pino";
import { caddyDuration, routesHaveDelay, withStreamCloseDelay } from "./streams.js";
import type { RouteWriter } from "./writer.js";

export interface ConnectionSettings {
  /** `stream_close_delay` every route the agent writes gets on its `reverse_proxy` handlers (0: none). */
  streamCloseDelayMs: number;
  /** `grace_period` of Caddy's HTTP app (0: Caddy's eternal default, left alone). */
  gracePeriodMs: number;
}

/**
 * Brings a Caddy the agent finds (adopted, or configured by an earlier version) in line with the
 * connection settings: every route's `reverse_proxy` handlers get the configured `stream_close_delay`,
 * and Caddy's HTTP app its `grace_period`, each as one config change made only when something differs.
 * Not a route change of the API: no history, no events, one log line. A failure is logged and the agent
 * starts anyway; every route the agent writes later gets the delay with its change.
 */
export async function conformCaddy(writer: RouteWriter, s: ConnectionSettings, log: Logger): Promise<void> {
  const delay = s.streamCloseDelayMs;
  const grace = s.gracePeriodMs > 0 ? caddyDuration(s.gracePeriodMs) : undefined;
  try {
    const done = await writer.conform({
      routesConform: (text) => routesHaveDelay(text, delay),
      conformRoute: (r) => withStreamCloseDelay(r, delay),
      ...(grace === undefined ? {} : { httpApp: { key: "grace_period", value: grace } }),
    });
    if (done.routes > 0 || done.httpApp)
      log.info(
        {
          routes_updated: done.routes,
          stream_close_delay: delay === 0 ? null : caddyDuration(delay),
          ...(done.httpApp ? { grace_period: grace } : {}),
        },
        "brought Caddy's routes and HTTP app in line with the connection settings",
      );
  } catch (err) {
    log.warn(
      { err },
      "could not apply stream_close_delay and grace_period to Caddy's config at start; routes get the delay when they are next written",
    );
  }
}
