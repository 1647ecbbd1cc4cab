import { type CaddyAdmin, CaddyApiError, JsonPieces } from "../caddy/admin.js";
import { caddyEtag, goJsonPieces } from "../caddy/etag.js";
import { managedServerCreation } from "../caddy/server-creation.js";
import type { CaddyRoutesOptions, RoutesState } from "./caddy-routes.js";
import type { Plan, RouteJson } from "./plan.js";

export type WriteOutcome =
  | { kind: "written" }
  /** If-Match failed: the routes changed since they were read, and nothing was written. */
  | { kind: "stale" }
  /** Caddy refused the new config and kept the old one. */
  | { kind: "refused"; message: string }
  /** The request never reached Caddy. */
  | { kind: "not_sent"; message: string }
  /** The connection failed after the request may have reached Caddy: the write may or may not have landed. */
  | { kind: "uncertain"; message: string };

/** Where the managed server's routes are, and what creating the server takes. */
export interface RoutesTarget extends Pick<CaddyRoutesOptions, "server" | "listen" | "fields"> {
  routesPath: string;
}

/** Connection errors that prove the request never reached Caddy. */
const NOT_SENT = new Set(["ECONNREFUSED", "ENOENT", "EACCES"]);

/**
 * Writes plan `p` over `state` as one request carrying If-Match on the ETag `state` has, and says how it
 * ended. A write whose answer was lost is looked up: when the routes now have the ETag of the plan's routes,
 * it landed (CaddyAdmin.write has already sent it again when it provably had not).
 */
export async function writePlan(
  admin: CaddyAdmin,
  target: RoutesTarget,
  state: RoutesState,
  p: Plan,
): Promise<WriteOutcome> {
  const req = requestFor(target, state, p);
  try {
    await admin.write(req.method, req.path, req.body, state.etag);
    return { kind: "written" };
  } catch (err) {
    if (err instanceof CaddyApiError)
      return err.status === 412 ? { kind: "stale" } : { kind: "refused", message: err.message };
    const message = (err as Error).message;
    const code = ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code;
    if (NOT_SENT.has(code ?? "")) return { kind: "not_sent", message };
    return (await landed(admin, target, p.routes)) ? { kind: "written" } : { kind: "uncertain", message };
  }
}

/** Whether Caddy's routes are now `routes`, as far as a read can tell. */
async function landed(admin: CaddyAdmin, target: RoutesTarget, routes: RouteJson[]): Promise<boolean> {
  const now = await admin.read(target.routesPath).catch(() => undefined);
  return now?.status === 200 && now.etag === caddyEtag(target.routesPath, routes);
}

interface WriteRequest {
  method: "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  body?: unknown;
}

/** The one request that writes plan `p`: a targeted write for a single change, the whole routes array for a batch. */
function requestFor(target: RoutesTarget, state: RoutesState, p: Plan): WriteRequest {
  const path = target.routesPath;
  if (!state.serverExists) {
    const { path: at, value } = managedServerCreation(state.config, target, p.routes);
    return { method: "POST", path: at, body: value };
  }
  if (!state.routesPresent) return { method: "PUT", path, body: p.routes };
  const only = p.applied.length === 1 ? p.applied[0] : undefined;
  if (!only) {
    // A batch that only adds routes at the end (creates of new hosts) sends just those: Caddy then parses
    // a few routes instead of all of them (half a second less at 20,000 routes).
    const added = appendedTo(state.routes, p.routes);
    if (added) return { method: "POST", path: `${path}/...`, body: added };
    // Any other batch sends all routes, as Go's text of them (Caddy decodes it to the same value) made
    // of each route's text kept for their ETag (caddy/etag.ts): only the routes the batch brought are
    // encoded, and the text is written piece by piece, never held whole.
    const routes = p.routes;
    return { method: "PATCH", path, body: new JsonPieces(() => goJsonPieces(routes)) };
  }
  const { op, at, wasPresent } = only;
  if (op.kind === "delete") return { method: "DELETE", path: `${path}/${at}` };
  if (wasPresent) return { method: "PATCH", path: `${path}/${at}`, body: op.route };
  if (at === state.routes.length) return { method: "POST", path, body: op.route };
  return { method: "PUT", path: `${path}/${at}`, body: op.route };
}

/**
 * The routes `next` adds after all of `current` when that is all it changes (the plan copies the array and
 * puts a new object wherever it changes a route), else undefined.
 */
function appendedTo(current: readonly RouteJson[], next: readonly RouteJson[]): RouteJson[] | undefined {
  if (next.length <= current.length) return undefined;
  for (let i = 0; i < current.length; i++) if (next[i] !== current[i]) return undefined;
  return next.slice(current.length);
}
