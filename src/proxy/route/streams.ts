import { caddyDuration } from "../../caddy/config.js";
import type { RouteJson } from "../../caddy/routes/plan.js";

/**
 * The route with `stream_close_delay` set on every `reverse_proxy` handler (those inside subroutes too),
 * or removed when `delayMs` is 0. The route itself when nothing changes, so a caller can tell by identity.
 */
export function withStreamCloseDelay<R extends RouteJson>(route: R, delayMs: number): R {
  const handle = route.handle;
  if (!Array.isArray(handle)) return route;
  let changed = false;
  const next = handle.map((h) => {
    const out = handlerWithDelay(h, delayMs);
    if (out !== h) changed = true;
    return out;
  });
  return changed ? { ...route, handle: next } : route;
}

function handlerWithDelay(h: Record<string, unknown>, delayMs: number): Record<string, unknown> {
  if (h.handler === "subroute" && Array.isArray(h.routes)) {
    let changed = false;
    const routes = (h.routes as RouteJson[]).map((r) => {
      const out = withStreamCloseDelay(r, delayMs);
      if (out !== r) changed = true;
      return out;
    });
    return changed ? { ...h, routes } : h;
  }
  if (h.handler !== "reverse_proxy") return h;
  if (delayMs === 0) {
    if (!("stream_close_delay" in h)) return h;
    const { stream_close_delay: _, ...rest } = h;
    return rest;
  }
  const want = caddyDuration(delayMs);
  // Caddy takes a duration as a string or as integer nanoseconds; an equal one stays as it is written.
  if (h.stream_close_delay === want || h.stream_close_delay === delayMs * 1e6) return h;
  return { ...h, stream_close_delay: want };
}

/**
 * Whether Caddy's JSON text of routes surely has the delay on every `reverse_proxy` handler already: as
 * many `"stream_close_delay":"<delay>"` as `"handler":"reverse_proxy"` (a handler holds a key once, and only
 * those handlers take it), or none at all when the delay is 0. False means "parse and look".
 */
export function routesHaveDelay(text: string, delayMs: number): boolean {
  const count = (needle: string) => text.split(needle).length - 1;
  if (delayMs === 0) return count('"stream_close_delay"') === 0;
  return count('"handler":"reverse_proxy"') === count(`"stream_close_delay":"${caddyDuration(delayMs)}"`);
}
