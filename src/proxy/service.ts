import type { Logger } from "pino";
import type { DenyList } from "../events/egress.js";
import { callbackUrlProblem } from "../events/egress.js";
import type { Outbox } from "../events/outbox.js";
import { ApiError, type FieldError, validationFailed, withoutPaths } from "../http/errors.js";
import type { Db, Migration } from "../store/db.js";
import { CaddyApiError, CaddyUnavailableError } from "./caddy-admin.js";
import { normalizeDomain, parseDial } from "./domain.js";
import type { Op, RouteJson } from "./plan.js";
import type { RouteWriteRequest } from "./schemas.js";
import type { ChangeResult, RouteWriter, WriteFailure } from "./writer.js";

export const proxyMigrations: Migration[] = [
  {
    name: "proxy.001_route_changes",
    sql: `
      CREATE TABLE route_changes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        operation TEXT NOT NULL CHECK (operation IN ('create', 'replace', 'delete', 'put')),
        route_id TEXT NOT NULL,
        previous TEXT,
        requested TEXT,
        requested_at TEXT NOT NULL,
        finished_at TEXT,
        outcome TEXT NOT NULL CHECK (outcome IN ('pending', 'applied', 'refused', 'failed', 'rolled_back', 'rollback_failed')),
        error TEXT,
        event_id TEXT
      );
      CREATE INDEX route_changes_route ON route_changes (route_id, id);`,
  },
];

type Operation = "create" | "replace" | "delete" | "put";

export interface RouteServiceOptions {
  db: Db;
  writer: RouteWriter;
  outbox: Outbox;
  deny: DenyList;
  /** Normalised id of the operator's route, if configured. */
  operatorRouteId: string | undefined;
  firstAttemptTimeoutMs: number;
  log: Logger;
}

/** Turns a write request into the Caddy route the agent manages, or the list of what is wrong with it. */
export function buildRoute(
  body: RouteWriteRequest,
  deny: DenyList,
): { id: string; route: RouteJson & { "@id": string } } {
  const errors: FieldError[] = [];
  const domain = normalizeDomain(body.domain);
  if (!domain.ok) errors.push({ field: "body.domain", message: domain.message });
  const strategy = body.strategy ?? "first";
  const dials = body.upstreams.map((u, i) => {
    const d = parseDial(u.dial);
    if (!d.ok) errors.push({ field: `body.upstreams[${i}].dial`, message: d.message });
    return d.ok ? d.dial : u.dial;
  });
  body.upstreams.forEach((u, i) => {
    if (u.weight !== undefined && strategy !== "weighted_round_robin")
      errors.push({
        field: `body.upstreams[${i}].weight`,
        message: "is only allowed with strategy weighted_round_robin",
      });
  });
  const weights = body.upstreams.map((u) => u.weight ?? 1);
  if (strategy === "weighted_round_robin" && weights.reduce((a, b) => a + b, 0) <= 0)
    errors.push({ field: "body.upstreams", message: "weights must sum to more than 0" });
  if (body.callback_url !== undefined && body.callback_url !== null) {
    const p = callbackUrlProblem(body.callback_url, deny);
    if (p) errors.push({ field: "body.callback_url", message: p });
  }
  if (errors.length > 0 || !domain.ok) throw validationFailed(errors);
  const id = domain.domain;
  return {
    id,
    route: {
      "@id": id,
      match: [{ host: [id] }],
      handle: [
        {
          handler: "reverse_proxy",
          upstreams: dials.map((dial) => ({ dial })),
          load_balancing: {
            selection_policy:
              strategy === "first" ? { policy: "first" } : { policy: "weighted_round_robin", weights },
          },
        },
      ],
      terminal: body.terminal ?? true,
    },
  };
}

/**
 * The problem a failed change answers with. Caddy's own words are kept (they say what it refused) with file
 * paths and socket addresses taken out; the untouched message goes to the log as the problem's cause.
 */
function failureToError(f: WriteFailure, id: string, previous: RouteJson | null): ApiError {
  switch (f.kind) {
    case "exists":
      return new ApiError("route_exists", `a route with @id ${id} already exists in Caddy's config`);
    case "not_found":
      return new ApiError("route_not_found", `the managed server has no route with @id ${id}`);
    case "unavailable":
    case "rolled_back":
      return new ApiError("proxy_unavailable", withoutPaths(f.message), { cause: f.message });
    case "rejected":
      return new ApiError(
        "proxy_rejected_change",
        `Caddy refused the change and keeps its previous config: ${withoutPaths(f.message)}`,
        { cause: f.message },
      );
    case "rollback_failed":
      return new ApiError("proxy_rollback_failed", withoutPaths(f.message), {
        cause: f.message,
        extensions: { captured_state: previous },
      });
    case "prepare_failed":
      return new ApiError("internal_error", "the agent could not record the change before applying it", {
        cause: f.message,
      });
  }
}

const OUTCOME_OF: Record<WriteFailure["kind"], string> = {
  exists: "refused",
  not_found: "refused",
  unavailable: "failed",
  rejected: "failed",
  prepare_failed: "failed",
  rolled_back: "rolled_back",
  rollback_failed: "rollback_failed",
};

/**
 * Route management: validates requests, keeps the operator's route out of reach of the API, records the
 * state each change replaces (and starts sending it as `route_backup`) before Caddy is touched, and hands the
 * change to the serialized writer.
 */
export class RouteService {
  private readonly insertChange;
  private readonly updatePrevious;
  private readonly finishChange;

  constructor(private readonly o: RouteServiceOptions) {
    this.insertChange = o.db.prepare(
      `INSERT INTO route_changes (operation, route_id, previous, requested, requested_at, outcome, event_id)
       VALUES (?, ?, ?, ?, ?, 'pending', ?)`,
    );
    this.updatePrevious = o.db.prepare(
      "UPDATE route_changes SET previous = ?, event_id = coalesce(?, event_id) WHERE id = ?",
    );
    this.finishChange = o.db.prepare(
      "UPDATE route_changes SET outcome = ?, error = ?, finished_at = ? WHERE id = ?",
    );
  }

  get operatorRouteId(): string | undefined {
    return this.o.operatorRouteId;
  }

  async listText(): Promise<string> {
    try {
      return await this.o.writer.routesText();
    } catch (err) {
      if (err instanceof CaddyUnavailableError || err instanceof CaddyApiError)
        throw new ApiError("proxy_unavailable", withoutPaths(err.message), { cause: err.message });
      throw err;
    }
  }

  /** One route of the managed server, read from Caddy now. */
  async get(routeId: string): Promise<RouteJson> {
    const routes = JSON.parse(await this.listText()) as RouteJson[];
    const route = routes.find((r) => r["@id"] === routeId);
    if (!route) throw new ApiError("route_not_found", `the managed server has no route with @id ${routeId}`);
    return route;
  }

  async create(body: RouteWriteRequest): Promise<RouteJson> {
    const { id, route } = buildRoute(body, this.o.deny);
    if (id === this.o.operatorRouteId)
      throw new ApiError("route_exists", `${id} is the operator's route, which the agent manages itself`);
    const r = await this.change("create", id, { kind: "create", route }, body.callback_url ?? undefined);
    return r.route ?? route;
  }

  async replace(routeId: string, body: RouteWriteRequest): Promise<RouteJson> {
    this.guardOperator(routeId);
    const { id, route } = buildRoute(body, this.o.deny);
    if (id !== routeId)
      throw new ApiError(
        "validation_failed",
        `body.domain derives to @id ${id}, not to the route_id ${routeId} of the path`,
        {
          errors: [{ field: "body.domain", message: `derives to ${id}, not to ${routeId}` }],
        },
      );
    const r = await this.change(
      "replace",
      id,
      { kind: "replace", id, route },
      body.callback_url ?? undefined,
    );
    return r.route ?? route;
  }

  async delete(routeId: string, callbackUrl: string | null | undefined): Promise<void> {
    this.guardOperator(routeId);
    if (callbackUrl !== undefined && callbackUrl !== null) {
      const p = callbackUrlProblem(callbackUrl, this.o.deny);
      if (p) throw validationFailed([{ field: "body.callback_url", message: p }]);
    }
    await this.change("delete", routeId, { kind: "delete", id: routeId }, callbackUrl ?? undefined);
  }

  /** Creates or replaces a route the agent itself owns (the operator's), bypassing the API's guard. */
  async put(route: RouteJson & { "@id": string }): Promise<RouteJson | null> {
    const r = await this.change("put", route["@id"], { kind: "put", route }, undefined);
    return r.previous;
  }

  private guardOperator(routeId: string): void {
    if (this.o.operatorRouteId !== undefined && routeId === this.o.operatorRouteId)
      throw new ApiError(
        "operator_route_immutable",
        `${routeId} is the operator's route; the agent manages it and the API cannot change it`,
      );
  }

  private async change(operation: Operation, id: string, op: Op, callbackUrl: string | undefined) {
    let changeId: number | undefined;
    const firstAttempts: Promise<boolean>[] = [];
    const requested = op.kind === "delete" ? null : JSON.stringify(op.route);
    const result: ChangeResult = await this.o.writer.submit({
      op,
      prepare: (previous) => {
        const now = new Date().toISOString();
        const prev = previous === null ? null : JSON.stringify(previous);
        const eventId = this.o.db.transaction(() => {
          const ev = callbackUrl
            ? this.o.outbox.add({
                type: "route_backup",
                url: callbackUrl,
                data: { operation, route_id: id, previous_route: previous, captured_at: now },
              })
            : null;
          if (changeId === undefined)
            changeId = Number(this.insertChange.run(operation, id, prev, requested, now, ev).lastInsertRowid);
          else this.updatePrevious.run(prev, ev, changeId);
          return ev;
        })();
        // Started before Caddy is touched but not awaited: the writer holds every queued change meanwhile,
        // so one slow receiver would hold up the changes of every other request.
        if (eventId) firstAttempts.push(this.o.outbox.deliverNow(eventId, this.o.firstAttemptTimeoutMs));
      },
    });
    if (changeId !== undefined) {
      const outcome = result.ok ? "applied" : OUTCOME_OF[result.failure.kind];
      const error = result.ok
        ? null
        : "message" in result.failure
          ? result.failure.message
          : result.failure.kind;
      this.finishChange.run(outcome, error, new Date().toISOString(), changeId);
    }
    // The answer waits (bounded by the attempt's time-out) for this change's own first attempts, so a
    // receiver that answers in time has the backup by the time the caller learns the outcome.
    await Promise.all(firstAttempts);
    if (!result.ok) throw failureToError(result.failure, id, result.previous);
    return result;
  }
}
