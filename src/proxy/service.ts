import type { Readable } from "node:stream";
import type { Logger } from "pino";
import { CaddyApiError, CaddyUnavailableError } from "../caddy/admin.js";
import type { RoutesStore } from "../caddy/routes/caddy-routes.js";
import {
  AGENT_ROUTE_ID_PREFIX,
  isRefusal,
  type Op,
  opId,
  type Refusal,
  type RouteJson,
} from "../caddy/routes/plan.js";
import type { Metrics } from "../metrics/metrics.js";
import { type InputIssue, InvalidInputError } from "../util/invalid-input.js";
import { type ConnectionSettings, conformCaddy } from "./conformance.js";
import {
  AgentRouteImmutableError,
  ChangeNotFoundError,
  changeError,
  OperatorDomainReservedError,
  OperatorRouteImmutableError,
  ProxyUnavailableError,
  RestoreConflictError,
  RouteExistsError,
  RouteIdMismatchError,
  RouteNotFoundError,
  RouteNotWrittenError,
} from "./errors.js";
import { type ChangeView, changeView, type RestoreResult, restoreConflict, restorePlan } from "./history.js";
import { type ChangeAbout, type ChangeJournal, outcomeText, RecordedChange, recorded } from "./journal.js";
import { buildRoute } from "./route/build-route.js";
import { operatorHostOf, requestFieldOf } from "./route/operator-host.js";
import { withStreamCloseDelay } from "./route/streams.js";
import { dialsOf, type UpstreamCheck } from "./route/upstream-check.js";
import { writtenRequest } from "./route/written-request.js";
import type { RouteWriteRequest } from "./schemas.js";
import type { RouteChangeStore, SettledOutcome } from "./store.js";
import type { ChangeAnswer, RouteWriter } from "./writer.js";

/** Who asked for a change, recorded with it and sent in its events. */
export interface ChangeContext {
  /** The caller's `x-request-id`, else the agent's id for the request; null for the agent's own changes. */
  requestId: string | null;
}

export interface RouteServiceOptions {
  writer: RouteWriter;
  /** Where the routes are read (the writer writes them through the same store). */
  routes: RoutesStore;
  journal: ChangeJournal;
  store: RouteChangeStore;
  /** Normalised id of the operator's route, if configured. */
  operatorRouteId: string | undefined;
  connections: ConnectionSettings;
  /** Whether a route can get `access_log: true` (the agent has a folder for the files). */
  accessLogs?: boolean;
  /** Where upstreams may not point (HOSTKEEPER_UPSTREAM_DENY_CIDRS, the agent's own ports). */
  upstreams: UpstreamCheck;
  log: Logger;
  metrics?: Metrics;
}

/** What a change asks for, besides its operation. */
interface ChangeOptions {
  callbackUrl: string | null | undefined;
  ctx: ChangeContext;
  /** For a restore: the change whose captured state it puts back. */
  restoredFrom?: number;
  /** The error when the route is not where the change needs it (404/409 of the plan), if not the usual. */
  conflict?: (refusal: Refusal) => Error;
}

const NO_REQUEST: ChangeContext = { requestId: null };

/** Runs a read of Caddy; Caddy unreachable or answering with an error is ProxyUnavailableError. */
async function proxied<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (err) {
    if (err instanceof CaddyUnavailableError || err instanceof CaddyApiError)
      throw new ProxyUnavailableError(err.message);
    throw err;
  }
}

/**
 * Route management: keeps the operator's route out of reach of the API, turns requests into the routes the
 * agent writes, and hands each change to the writer, which batches it with concurrent ones and has the
 * journal record the state it replaces before Caddy is touched and how it ended after; the answer then
 * waits for the first attempts of its callbacks. Reads go to the routes store.
 */
export class RouteService {
  private conforming: Promise<void> = Promise.resolve();

  constructor(private readonly o: RouteServiceOptions) {}

  get operatorRouteId(): string | undefined {
    return this.o.operatorRouteId;
  }

  /** The managed server's routes, read from Caddy now: Caddy's bytes, neither held whole nor parsed. */
  list(): Promise<Readable | string> {
    return proxied(() => this.o.routes.stream());
  }

  /** One route of the managed server, read from Caddy now. */
  async get(routeId: string): Promise<RouteJson> {
    const route = await this.find(routeId);
    if (!route) throw new RouteNotFoundError(`the managed server has no route with @id ${routeId}`);
    return route;
  }

  /**
   * The write request that makes the route Caddy holds now, in its normalised form (see `writtenRequest`);
   * RouteNotWrittenError when none does.
   */
  async request(routeId: string): Promise<NonNullable<ReturnType<typeof writtenRequest>>> {
    const written = writtenRequest(await this.get(routeId));
    if (written === undefined)
      throw new RouteNotWrittenError(
        `no write request makes route ${routeId} as Caddy holds it: it was written outside the agent's API, or changed in Caddy since`,
      );
    return written;
  }

  /**
   * The changes recorded for a route, newest first. An id with none is not found unless the managed server
   * holds such a route (one the agent never changed, whose history is empty); only then is Caddy asked.
   */
  async history(routeId: string, limit: number): Promise<ChangeView[]> {
    const rows = this.o.store.ofRoute(routeId, limit);
    if (rows.length === 0 && !(await this.find(routeId)))
      throw new RouteNotFoundError(
        `the agent has recorded no change of a route with @id ${routeId}, and the managed server has none`,
      );
    return rows.map((r) => changeView(r, this.o.journal.isInFlight(r.id)));
  }

  async create(request: RouteWriteRequest, ctx = NO_REQUEST): Promise<RouteJson> {
    const { id, route } = this.built(request);
    if (id === this.o.operatorRouteId)
      throw new RouteExistsError(`${id} is the operator's route, which the agent manages itself`);
    const admitting = this.admitted(request, id, route);
    if (admitting) await admitting;
    const result = await this.change({ kind: "create", route }, "create", {
      callbackUrl: request.callback_url,
      ctx,
    });
    return result.route ?? route;
  }

  async replace(routeId: string, request: RouteWriteRequest, ctx = NO_REQUEST): Promise<RouteJson> {
    this.guardOperator(routeId);
    const { id, route } = this.built(request);
    if (id !== routeId) throw new RouteIdMismatchError(id, routeId);
    const admitting = this.admitted(request, id, route);
    if (admitting) await admitting;
    const result = await this.change({ kind: "replace", id, route }, "replace", {
      callbackUrl: request.callback_url,
      ctx,
    });
    return result.route ?? route;
  }

  async delete(routeId: string, callbackUrl: string | null | undefined, ctx = NO_REQUEST): Promise<void> {
    this.guardOperator(routeId);
    await this.change({ kind: "delete", id: routeId }, "delete", { callbackUrl, ctx });
  }

  /**
   * Puts back the state change `changeId` of the route captured, as a change of its own (recorded, backed
   * up, announced like the others); see `restorePlan` for what it does. A removal or replacement needs the
   * route in the managed server, a re-creation needs its id free in all of Caddy's config.
   */
  async restore(
    routeId: string,
    changeId: number,
    callbackUrl: string | null | undefined,
    ctx = NO_REQUEST,
  ): Promise<RestoreResult> {
    this.guardOperator(routeId);
    const row = this.o.store.byId(changeId);
    if (!row || row.route_id !== routeId) {
      if (!this.o.store.hasAny(routeId))
        throw new RouteNotFoundError(`the agent has recorded no change of a route with @id ${routeId}`);
      throw new ChangeNotFoundError(`route ${routeId} has no change ${changeId}`);
    }
    if (this.o.journal.isInFlight(row.id))
      throw new RestoreConflictError(`change ${row.id} of route ${routeId} is still being applied`);
    const { op, action } = restorePlan(row);
    if (op.kind !== "delete")
      this.guardOperatorHost(op.route, (host) =>
        host === null
          ? `a matcher set without a host matcher in change ${row.id}'s captured route (it takes every host)`
          : `the host ${host} of change ${row.id}'s captured route`,
      );
    // A captured state was accepted once, but the rules may have changed since, or the route was written
    // outside the API: a restore is a write like the others.
    const checking =
      op.kind === "delete" ? undefined : refused(this.o.upstreams.capturedRouteIssues(op.route, "change_id"));
    if (checking) await checking;
    const result = await this.change(op, "restore", {
      callbackUrl,
      ctx,
      restoredFrom: row.id,
      conflict: (refused) => new RestoreConflictError(restoreConflict(row, op, refused)),
    });
    if (result.changeId === undefined) throw new Error("a restore that applied has no change record");
    return { change_id: result.changeId, restored_from: row.id, action, route: result.route };
  }

  /** Creates or replaces a route the agent itself owns (the operator's), bypassing the API's guard. */
  async put(route: RouteJson & { "@id": string }): Promise<RouteJson | null> {
    const result = await this.change({ kind: "put", route }, "put", {
      callbackUrl: undefined,
      ctx: NO_REQUEST,
    });
    return result.previous;
  }

  /** Brings the Caddy found at start in line with the connection settings (see `conformCaddy`). */
  conformCaddy(): Promise<void> {
    this.conforming = conformCaddy(this.o.writer, this.o.connections, this.o.log);
    return this.conforming;
  }

  /** Resolves once the start's `conformCaddy` has ended, however it ended. */
  whenConformed(): Promise<void> {
    return this.conforming;
  }

  private find(routeId: string): Promise<RouteJson | undefined> {
    return proxied(() => this.o.routes.route(routeId));
  }

  /** The route a write request makes; `access_log` only where the agent has a folder for the files. */
  private built(request: RouteWriteRequest): ReturnType<typeof buildRoute> {
    if (request.access_log === true && this.o.accessLogs !== true)
      throw new InvalidInputError([
        {
          field: "access_log",
          message:
            "cannot be true: the agent has no folder for access logs (HOSTKEEPER_ACCESS_LOG_DIR, needed with HOSTKEEPER_CADDY_ADMIN)",
        },
      ]);
    return buildRoute(request);
  }

  /**
   * The write-time rules of a create or replace beyond the request's shape: the route must not answer for
   * the operator's domain, nor its upstreams reach what must stay private. A promise only while host names
   * are resolved, so a change that needs none reaches the writer in the order it was asked for.
   */
  private admitted(request: RouteWriteRequest, id: string, route: RouteJson): Promise<void> | undefined {
    this.guardOperatorHost(route, (host) => requestFieldOf(request, id, host));
    return refused(this.o.upstreams.requestIssues(request));
  }

  /**
   * Refuses a route that would answer for the operator's domain, whether or not the operator's route is in
   * Caddy yet (the writer's host check sees only routes that are). `what` says what covers it.
   */
  private guardOperatorHost(route: RouteJson, what: (host: string | null) => string): void {
    const domain = this.o.operatorRouteId;
    const host = domain === undefined ? undefined : operatorHostOf(route, domain);
    if (domain === undefined || host === undefined) return;
    throw new OperatorDomainReservedError(
      `${what(host)} covers ${domain}, the operator's domain, which only the agent routes: nothing was changed`,
      domain,
      host,
    );
  }

  /** The operator's route and the agent's own routes (the HTTPS redirect) are not the API's to change. */
  private guardOperator(routeId: string): void {
    if (this.o.operatorRouteId !== undefined && routeId === this.o.operatorRouteId)
      throw new OperatorRouteImmutableError(routeId);
    if (routeId.startsWith(AGENT_ROUTE_ID_PREFIX)) throw new AgentRouteImmutableError(routeId);
  }

  /**
   * One change: through the writer (whose journal records it before Caddy is touched and how it ended
   * after), then counted and logged, then its callbacks' first attempts awaited, then the answer.
   */
  private async change(
    op: Op,
    operation: ChangeAbout["operation"],
    { callbackUrl, ctx, restoredFrom, conflict }: ChangeOptions,
  ): Promise<{ previous: RouteJson | null; route: RouteJson | null; changeId: number | undefined }> {
    const started = performance.now();
    // Every route the agent writes, whoever asked (the API, a restore, the operator's switch), keeps its
    // upgraded streams across reloads for the configured delay.
    const delayed: Op =
      op.kind === "delete"
        ? op
        : { ...op, route: withStreamCloseDelay(op.route, this.o.connections.streamCloseDelayMs) };
    const about: ChangeAbout = {
      operation,
      route_id: opId(delayed),
      ...(restoredFrom === undefined ? {} : { restored_from: restoredFrom }),
      request_id: ctx.requestId,
    };
    const change = new RecordedChange(delayed, about, callbackUrl ?? undefined);
    const answer = await this.o.writer.submit(change);
    const outcome = recorded(answer.outcome);
    // Counted here rather than with the record: a change Caddy was unreachable for fails before it has one.
    this.o.metrics?.routeChanges.inc({ operation, outcome });
    this.logChange(change, answer, outcome, performance.now() - started);
    await this.o.journal.delivered(change);
    const ended = answer.outcome;
    if (ended.kind === "applied")
      return { previous: answer.previous, route: ended.route, changeId: answer.changeId };
    if (conflict && isRefusal(ended)) throw conflict(ended);
    throw changeError(ended, about.route_id, answer.previous);
  }

  /**
   * The one line a change leaves in the log: what it was, the upstreams it wrote (or, for a removal, those
   * of the route it removed), how it ended, with how many changes it went to Caddy, how long it took from
   * the request to its outcome, and the request id the caller gave (or the agent generated).
   */
  private logChange(change: RecordedChange, answer: ChangeAnswer, outcome: SettledOutcome, ms: number): void {
    const error = outcomeText(answer.outcome);
    const { op, about } = change;
    const fields = {
      operation: about.operation,
      route_id: about.route_id,
      ...(about.restored_from === undefined ? {} : { restored_from: about.restored_from }),
      request_id: about.request_id,
      change_id: change.id ?? null,
      upstreams: dialsOf(op.kind === "delete" ? answer.previous : op.route),
      outcome,
      batch_size: answer.batchSize,
      duration_ms: Math.round(ms * 10) / 10,
      ...(error === null ? {} : { error }),
    };
    const line = `route ${about.route_id}: ${about.operation} ${outcome}`;
    if (outcome === "applied" || outcome === "refused") this.o.log.info(fields, line);
    else this.o.log.warn(fields, line);
  }
}

/**
 * Throws InvalidInputError for the upstreams' `found` issues (see route/upstream-check.ts); a promise only
 * while they are being found (host names resolving), so a change that needs no resolution reaches the
 * writer in the order it was asked for.
 */
function refused(found: InputIssue[] | Promise<InputIssue[]>): Promise<void> | undefined {
  const refuse = (issues: InputIssue[]) => {
    if (issues.length > 0) throw new InvalidInputError(issues);
  };
  if (!Array.isArray(found)) return found.then(refuse);
  refuse(found);
  return undefined;
}
