import { type CaddyAdmin, CaddyApiError, JsonText } from "../caddy/admin.js";
import { caddyEtagOfText, goJson } from "../caddy/etag.js";
import type { CaddyRoutesOptions, RoutesState } from "./caddy-routes.js";
import type { Plan, RouteJson } from "./plan.js";
import { managedServerCreation } from "./server-creation.js";

export type WriteOutcome =
  /** `text`: the routes as Caddy's GET now writes them, when the write sent all of them that way. */
  | { kind: "written"; text?: string }
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
  // A write of all routes sends Go's text of them (Caddy decodes it to the same value): the agent needs that
  // text for their new ETag, and so makes one 6 MB string at 20,000 routes instead of two.
  const text = sendsAll(state, p) ? goJson(p.routes) : undefined;
  try {
    await send(admin, target, state, p, text);
    return text === undefined ? { kind: "written" } : { kind: "written", text };
  } catch (err) {
    if (err instanceof CaddyApiError)
      return err.status === 412 ? { kind: "stale" } : { kind: "refused", message: err.message };
    const message = (err as Error).message;
    const code = ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code;
    if (NOT_SENT.has(code ?? "")) return { kind: "not_sent", message };
    if (!(await landed(admin, target, text ?? goJson(p.routes)))) return { kind: "uncertain", message };
    return text === undefined ? { kind: "written" } : { kind: "written", text };
  }
}

/** Whether Caddy's routes are now those whose text is `text`, as far as a read can tell. */
async function landed(admin: CaddyAdmin, target: RoutesTarget, text: string): Promise<boolean> {
  const now = await admin.read(target.routesPath).catch(() => undefined);
  return now?.status === 200 && now.etag === caddyEtagOfText(target.routesPath, text);
}

/** Whether `send` writes all of the plan's routes over the existing ones (a batch that is not an append). */
function sendsAll(state: RoutesState, p: Plan): boolean {
  return (
    state.serverExists && state.routesPresent && p.applied.length !== 1 && !appendedTo(state.routes, p.routes)
  );
}

/** One request: a targeted write for a single change, the whole routes array for a batch. */
function send(
  admin: CaddyAdmin,
  target: RoutesTarget,
  state: RoutesState,
  p: Plan,
  text: string | undefined,
): Promise<void> {
  const ifMatch = state.etag;
  const path = target.routesPath;
  if (!state.serverExists) {
    const { path: at, value } = managedServerCreation(state.config, target, p.routes);
    return admin.write("POST", at, value, ifMatch);
  }
  if (!state.routesPresent) return admin.write("PUT", path, p.routes, ifMatch);
  const only = p.applied.length === 1 ? p.applied[0] : undefined;
  if (!only) {
    // A batch that only adds routes at the end (creates of new hosts) sends just those: Caddy then parses
    // a few routes instead of all of them (half a second less at 20,000 routes).
    const added = appendedTo(state.routes, p.routes);
    if (added) return admin.write("POST", `${path}/...`, added, ifMatch);
    return admin.write("PATCH", path, text === undefined ? p.routes : new JsonText(text), ifMatch);
  }
  const { op, at, wasPresent } = only;
  if (op.kind === "delete") return admin.write("DELETE", `${path}/${at}`, undefined, ifMatch);
  if (wasPresent) return admin.write("PATCH", `${path}/${at}`, op.route, ifMatch);
  if (at === state.routes.length) return admin.write("POST", path, op.route, ifMatch);
  return admin.write("PUT", `${path}/${at}`, op.route, ifMatch);
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
