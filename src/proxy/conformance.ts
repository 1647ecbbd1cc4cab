import type { Logger } from "pino";
import { caddyDuration } from "../caddy/config.js";
import type { ConfigField } from "../caddy/config-fields.js";
import type { LeadingRoute } from "../caddy/routes/leading-route.js";
import { decoysInPlace, withDecoy } from "./route/basic-auth-upgrade.js";
import { routesHaveDelay, withStreamCloseDelay } from "./route/streams.js";
import type { RouteWriter } from "./writer.js";

export interface ConnectionSettings {
  /** `stream_close_delay` every route the agent writes gets on its `reverse_proxy` handlers (0: none). */
  streamCloseDelayMs: number;
  /** The fields the agent keeps in Caddy's config outside the routes (`agentCaddyFields`). */
  fields: readonly ConfigField[];
  /** The route that leads all others (the HTTPS redirect, route/https-redirect.ts), or its absence. */
  lead: LeadingRoute;
}

/**
 * Brings a Caddy the agent finds (adopted, or configured by an earlier version) in line with the settings:
 * the fields the agent keeps outside the routes (the local CA's trust, the TLS issuer, the HTTP and HTTPS
 * ports, the managed server's automatic HTTPS, `grace_period`), then every route's `reverse_proxy`
 * handlers their `stream_close_delay`, the `basic_auth` routes an earlier version wrote their decoy
 * (route/basic-auth-upgrade.ts) and the HTTPS redirect its place ahead of them (or its removal); each field and the routes as one config change made only when it differs. Not
 * a route change of the API: no history, no events, one log line. A failure is logged and the agent
 * starts anyway; every route the agent writes later gets the delay with its change.
 */
export async function conformCaddy(writer: RouteWriter, s: ConnectionSettings, log: Logger): Promise<void> {
  const delay = s.streamCloseDelayMs;
  try {
    const done = await writer.conform({
      routesConform: (text) => routesHaveDelay(text, delay) && decoysInPlace(text),
      conformRoute: (r) => withDecoy(withStreamCloseDelay(r, delay)),
      fields: s.fields,
      lead: s.lead,
    });
    if (done.routes > 0 || done.fields.length > 0)
      log.info(
        {
          routes_updated: done.routes,
          stream_close_delay: delay === 0 ? null : caddyDuration(delay),
          fields_updated: done.fields,
        },
        "brought Caddy's config in line with the settings",
      );
  } catch (err) {
    log.warn(
      { err },
      "could not bring Caddy's config in line with the settings at start (TLS issuance, ports, grace_period, stream_close_delay); routes get the delay when they are next written",
    );
  }
}
