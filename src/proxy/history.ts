import type { Op, Refusal, RouteJson } from "../caddy/routes/plan.js";
import { withoutPaths } from "../util/without-paths.js";
import { routeNamed } from "./errors.js";
import type { ChangeOperation, HistoryOutcome } from "./schemas.js";
import type { ChangeRow } from "./store.js";

/** A change as the history shows it. */
export interface ChangeView {
  change_id: number;
  route_id: string;
  operation: ChangeOperation;
  outcome: HistoryOutcome;
  requested_at: string;
  finished_at: string | null;
  request_id: string | null;
  previous_route: RouteJson | null;
  requested_route: RouteJson | null;
  restored_from: number | null;
  error: string | null;
  backup_event_id: string | null;
  change_event_id: string | null;
}

export interface RestoreResult {
  change_id: number;
  restored_from: number;
  action: "recreated" | "replaced" | "removed";
  route: RouteJson | null;
}

/** What a restore of a change does: the operation, and how the answer names it. */
export interface RestorePlan {
  op: Op;
  action: RestoreResult["action"];
}

const parseRoute = (text: string | null): RouteJson | null =>
  text === null ? null : (JSON.parse(text) as RouteJson);

/** A recorded change as the history shows it; `inFlight`: whether this process is applying it now. */
export function changeView(r: ChangeRow, inFlight: boolean): ChangeView {
  return {
    change_id: r.id,
    route_id: r.route_id,
    operation: r.operation,
    // A pending record this process is not applying was cut short by a stop of the agent.
    outcome: r.outcome === "pending" && !inFlight ? "interrupted" : r.outcome,
    requested_at: r.requested_at,
    finished_at: r.finished_at,
    request_id: r.request_id,
    previous_route: parseRoute(r.previous),
    requested_route: parseRoute(r.requested),
    restored_from: r.restored_from,
    error: r.error === null ? null : withoutPaths(r.error),
    backup_event_id: r.event_id,
    change_event_id: r.change_event_id,
  };
}

/**
 * What a restore of change `row` does, from the states it captured alone: it had no previous route (it
 * created one): the route is removed; it removed the route: the previous route is created again; it
 * replaced the route: the previous route replaces the current one.
 */
export function restorePlan(row: ChangeRow): RestorePlan {
  const previous = parseRoute(row.previous);
  const id = row.route_id;
  if (previous === null) return { op: { kind: "delete", id }, action: "removed" };
  if (previous["@id"] !== id) throw new Error(`the state captured by change ${row.id} is not route ${id}`);
  const route = previous as RouteJson & { "@id": string };
  if (row.requested === null) return { op: { kind: "create", route }, action: "recreated" };
  return { op: { kind: "replace", id, route }, action: "replaced" };
}

/** Why a restore of `row` does not fit the route as it is now, for the conflict Caddy's state gave. */
export function restoreConflict(row: ChangeRow, op: Op, refused: Refusal): string {
  const routeId = row.route_id;
  if (refused.kind === "host_taken")
    return `change ${row.id}'s captured route serves host ${refused.host}, which ${routeNamed(refused.owner)} serves now: nothing was changed`;
  return refused.kind === "exists"
    ? `change ${row.id} removed route ${routeId}, but its @id is in use in Caddy's config again: nothing was changed`
    : `change ${row.id} ${op.kind === "delete" ? "created" : "replaced"} route ${routeId}, which the managed server no longer has: nothing was changed`;
}
