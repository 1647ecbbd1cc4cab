import type { Readable } from "node:stream";
import type { Logger } from "pino";
import { CaddyApiError, CaddyUnavailableError } from "../caddy/admin.js";
import type { DenyList } from "../events/egress.js";
import { callbackUrlProblem } from "../events/egress.js";
import type { Outbox } from "../events/outbox.js";
import { ApiError, type FieldError, validationFailed, withoutPaths } from "../http/errors.js";
import type { Metrics } from "../metrics/metrics.js";
import type { Db, Migration } from "../store/db.js";
import { normalizeDomain, parseDial } from "./domain.js";
import type { Op, RouteJson } from "./plan.js";
import type { ChangeOperation, ChangeOutcome, RouteWriteRequest } from "./schemas.js";
import { caddyDuration, routesHaveDelay, withStreamCloseDelay } from "./streams.js";
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
  {
    // SQLite cannot widen a CHECK in place: the table is rebuilt (ids kept, so history and restores that
    // name them stay right) to take restores, the caller's request id and the route_change event.
    name: "proxy.002_history_and_restore",
    sql: `
      CREATE TABLE route_changes_v2 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        operation TEXT NOT NULL CHECK (operation IN ('create', 'replace', 'delete', 'put', 'restore')),
        route_id TEXT NOT NULL,
        previous TEXT,
        requested TEXT,
        requested_at TEXT NOT NULL,
        finished_at TEXT,
        outcome TEXT NOT NULL CHECK (outcome IN ('pending', 'applied', 'refused', 'failed', 'rolled_back', 'rollback_failed')),
        error TEXT,
        event_id TEXT,
        request_id TEXT,
        restored_from INTEGER,
        change_event_id TEXT
      );
      INSERT INTO route_changes_v2
          (id, operation, route_id, previous, requested, requested_at, finished_at, outcome, error, event_id)
        SELECT id, operation, route_id, previous, requested, requested_at, finished_at, outcome, error, event_id
        FROM route_changes;
      -- Ids are never given twice (AUTOINCREMENT): the new table goes on from the old one's high-water mark.
      DELETE FROM sqlite_sequence WHERE name = 'route_changes_v2';
      INSERT INTO sqlite_sequence (name, seq)
        SELECT 'route_changes_v2', seq FROM sqlite_sequence WHERE name = 'route_changes';
      DROP TABLE route_changes;
      ALTER TABLE route_changes_v2 RENAME TO route_changes;
      CREATE INDEX route_changes_route ON route_changes (route_id, id);`,
  },
];

/** Who asked for a change, recorded with it and sent in its events. */
export interface ChangeContext {
  /** The caller's `x-request-id`, else the agent's id for the request; null for the agent's own changes. */
  requestId: string | null;
}

/** A row of `route_changes`. */
interface ChangeRow {
  id: number;
  operation: ChangeOperation;
  route_id: string;
  previous: string | null;
  requested: string | null;
  requested_at: string;
  finished_at: string | null;
  outcome: Exclude<ChangeOutcome, "interrupted">;
  error: string | null;
  event_id: string | null;
  request_id: string | null;
  restored_from: number | null;
  change_event_id: string | null;
}

/** A change as the history shows it. */
export interface ChangeView {
  change_id: number;
  route_id: string;
  operation: ChangeOperation;
  outcome: ChangeOutcome;
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

/** The outcome a `route_change` event reports. */
type EventOutcome = "applied" | "failed" | "rolled_back" | "rollback_failed";

/**
 * The ordering key of a route's events to one receiver: its route_backup and route_change events are
 * delivered one at a time in the order written, so the receiver sees a change's backup before its outcome.
 * Per receiver too, so a receiver that is down holds up no other receiver of the route's events.
 */
export const routeEventKey = (routeId: string, url: string) => `route:${routeId} ${url}`;

const parseRoute = (text: string | null): RouteJson | null =>
  text === null ? null : (JSON.parse(text) as RouteJson);

/**
 * How the API shows a route Caddy holds in another form than the one the API answers with. While
 * `active()` is false (no route Caddy holds needs it), the list passes Caddy's bytes through; while it is
 * true, the list is parsed and every route goes through `show`.
 */
export interface RouteView {
  active(): boolean;
  /** The route as the API shows it; the route itself when it needs no change. */
  show(route: RouteJson): RouteJson;
}

/** Runs a read of Caddy; Caddy unreachable or answering with an error is the API's 503. */
async function proxied<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (err) {
    if (err instanceof CaddyUnavailableError || err instanceof CaddyApiError)
      throw new ApiError("proxy_unavailable", withoutPaths(err.message), { cause: err.message });
    throw err;
  }
}

export interface RouteServiceOptions {
  db: Db;
  writer: RouteWriter;
  outbox: Outbox;
  deny: DenyList;
  /** Normalised id of the operator's route, if configured. */
  operatorRouteId: string | undefined;
  firstAttemptTimeoutMs: number;
  /** `stream_close_delay` every route the agent writes gets on its `reverse_proxy` handlers (0: none). */
  streamCloseDelayMs: number;
  /** `grace_period` of Caddy's HTTP app (0: Caddy's eternal default, left alone). */
  gracePeriodMs: number;
  /** How routes Caddy holds in another form are shown; absent: every route as Caddy holds it. */
  display?: RouteView;
  log: Logger;
  metrics?: Metrics;
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

const OUTCOME_OF: Record<WriteFailure["kind"], Exclude<ChangeOutcome, "pending" | "interrupted">> = {
  exists: "refused",
  not_found: "refused",
  unavailable: "failed",
  rejected: "failed",
  prepare_failed: "failed",
  rolled_back: "rolled_back",
  rollback_failed: "rollback_failed",
};

/** How a settled change ended, as its history records it. */
type SettledOutcome = "applied" | (typeof OUTCOME_OF)[WriteFailure["kind"]];

function settledOutcome(result: ChangeResult): SettledOutcome {
  return result.ok ? "applied" : OUTCOME_OF[result.failure.kind];
}

/** A `route_change` receiver learns only whether the change happened: a refusal is a failure to it. */
const eventOutcome = (outcome: SettledOutcome): EventOutcome => (outcome === "refused" ? "failed" : outcome);

/** The failure's own words, or its kind when it has none (a 404/409 refusal). */
function failureText(result: ChangeResult): string | null {
  if (result.ok) return null;
  return "message" in result.failure ? result.failure.message : result.failure.kind;
}

/**
 * The route as Caddy holds it once a change settled: the new one when it applied (null after a removal),
 * the previous one when Caddy kept or got it back (null when there was none), null when the rollback failed
 * and what Caddy holds is not known.
 */
function routeAfter(result: ChangeResult): RouteJson | null {
  if (result.ok) return result.route;
  return result.failure.kind === "rollback_failed" ? null : result.previous;
}

interface ChangeOptions {
  callbackUrl: string | undefined;
  ctx: ChangeContext;
  /** For a restore: the change whose captured state it puts back. */
  restoredFrom?: number;
  /** The answer when the route is not where the change needs it (404/409 of the plan), if not the usual. */
  conflict?: (kind: "exists" | "not_found") => ApiError;
}

/** The upstreams a route dials, in its handlers' order: what a change's log line names. */
function upstreamsOf(route: RouteJson | null): string[] {
  const dials: string[] = [];
  for (const h of route?.handle ?? []) {
    const ups = h.upstreams;
    if (!Array.isArray(ups)) continue;
    for (const u of ups as { dial?: unknown }[]) if (typeof u.dial === "string") dials.push(u.dial);
  }
  return dials;
}

/** What a restore does, from the states the restored change captured (see the README). */
type RestorePlan = { op: Op; action: RestoreResult["action"] };

/**
 * Route management: validates requests, keeps the operator's route out of reach of the API, records the
 * state each change replaces (and starts sending it as `route_backup`) before Caddy is touched, hands the
 * change to the serialized writer, and records its outcome (with a `route_change` event) once it settled.
 */
export class RouteService {
  private readonly insertChange;
  private readonly updatePrevious;
  private readonly setBackupEvent;
  private readonly finishChange;
  private readonly setChangeEvent;
  private readonly changeById;
  private readonly changesOf;
  private readonly anyChangeOf;
  /** Changes of this process not yet settled: a pending row not here was cut short by a stop of the agent. */
  private readonly inFlight = new Set<number>();
  private conforming: Promise<void> = Promise.resolve();

  constructor(private readonly o: RouteServiceOptions) {
    this.insertChange = o.db.prepare(
      `INSERT INTO route_changes (operation, route_id, previous, requested, requested_at, outcome, request_id, restored_from)
       VALUES (@operation, @route_id, @previous, @requested, @requested_at, 'pending', @request_id, @restored_from)`,
    );
    this.updatePrevious = o.db.prepare("UPDATE route_changes SET previous = ? WHERE id = ?");
    this.setBackupEvent = o.db.prepare("UPDATE route_changes SET event_id = ? WHERE id = ?");
    this.finishChange = o.db.prepare(
      "UPDATE route_changes SET outcome = ?, error = ?, finished_at = ? WHERE id = ?",
    );
    this.setChangeEvent = o.db.prepare("UPDATE route_changes SET change_event_id = ? WHERE id = ?");
    this.changeById = o.db.prepare("SELECT * FROM route_changes WHERE id = ?");
    this.changesOf = o.db.prepare("SELECT * FROM route_changes WHERE route_id = ? ORDER BY id DESC LIMIT ?");
    this.anyChangeOf = o.db.prepare("SELECT 1 FROM route_changes WHERE route_id = ? LIMIT 1");
  }

  get operatorRouteId(): string | undefined {
    return this.o.operatorRouteId;
  }

  /**
   * The managed server's routes, read from Caddy now. While no route needs showing differently from how
   * Caddy holds it (see RouteView), Caddy's bytes stream through untouched, neither held whole nor parsed.
   */
  async list(): Promise<Readable | string> {
    const view = this.o.display;
    return proxied(async () => {
      if (!view?.active()) return this.o.writer.routesStream();
      const routes = JSON.parse(await this.o.writer.routesText()) as RouteJson[];
      return JSON.stringify(routes.map((r) => view.show(r)));
    });
  }

  /** One route of the managed server, read from Caddy now. */
  async get(routeId: string): Promise<RouteJson> {
    const route = await this.find(routeId);
    if (!route) throw new ApiError("route_not_found", `the managed server has no route with @id ${routeId}`);
    return route;
  }

  /**
   * The changes recorded for a route, newest first. An id with none is 404 unless the managed server holds
   * such a route (one the agent never changed, whose history is empty); only then is Caddy asked.
   */
  async history(routeId: string, limit: number): Promise<ChangeView[]> {
    const rows = this.changesOf.all(routeId, limit) as ChangeRow[];
    if (rows.length === 0 && !(await this.find(routeId)))
      throw new ApiError(
        "route_not_found",
        `the agent has recorded no change of a route with @id ${routeId}, and the managed server has none`,
      );
    return rows.map((r) => this.view(r));
  }

  async create(body: RouteWriteRequest, ctx: ChangeContext = { requestId: null }): Promise<RouteJson> {
    const { id, route } = buildRoute(body, this.o.deny);
    if (id === this.o.operatorRouteId)
      throw new ApiError("route_exists", `${id} is the operator's route, which the agent manages itself`);
    const { result } = await this.change(
      "create",
      id,
      { kind: "create", route },
      {
        callbackUrl: body.callback_url ?? undefined,
        ctx,
      },
    );
    return result.route ?? route;
  }

  async replace(
    routeId: string,
    body: RouteWriteRequest,
    ctx: ChangeContext = { requestId: null },
  ): Promise<RouteJson> {
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
    const { result } = await this.change(
      "replace",
      id,
      { kind: "replace", id, route },
      {
        callbackUrl: body.callback_url ?? undefined,
        ctx,
      },
    );
    return result.route ?? route;
  }

  async delete(
    routeId: string,
    callbackUrl: string | null | undefined,
    ctx: ChangeContext = { requestId: null },
  ): Promise<void> {
    this.guardOperator(routeId);
    this.checkCallbackUrl(callbackUrl);
    await this.change(
      "delete",
      routeId,
      { kind: "delete", id: routeId },
      {
        callbackUrl: callbackUrl ?? undefined,
        ctx,
      },
    );
  }

  /**
   * Puts back the state change `changeId` of the route captured, as a change of its own (recorded, backed
   * up, announced like the others). What it does follows from that change's captured states alone: it had
   * no previous route (it created one): the route is removed; it removed the route: the previous route is
   * created again; it replaced the route: the previous route replaces the current one. A removal or
   * replacement needs the route in the managed server, a re-creation needs its id free in all of Caddy's
   * config; otherwise 409.
   */
  async restore(
    routeId: string,
    changeId: number,
    callbackUrl: string | null | undefined,
    ctx: ChangeContext = { requestId: null },
  ): Promise<RestoreResult> {
    this.guardOperator(routeId);
    this.checkCallbackUrl(callbackUrl);
    const row = this.changeById.get(changeId) as ChangeRow | undefined;
    if (!row || row.route_id !== routeId) {
      if (!this.anyChangeOf.get(routeId))
        throw new ApiError(
          "route_not_found",
          `the agent has recorded no change of a route with @id ${routeId}`,
        );
      throw new ApiError("change_not_found", `route ${routeId} has no change ${changeId}`);
    }
    if (this.inFlight.has(row.id))
      throw new ApiError("restore_conflict", `change ${row.id} of route ${routeId} is still being applied`);
    const { op, action } = restorePlan(row);
    const { result, changeId: restoreId } = await this.change("restore", routeId, op, {
      callbackUrl: callbackUrl ?? undefined,
      ctx,
      restoredFrom: row.id,
      conflict: (kind) =>
        new ApiError(
          "restore_conflict",
          kind === "exists"
            ? `change ${row.id} removed route ${routeId}, but its @id is in use in Caddy's config again: nothing was changed`
            : `change ${row.id} ${op.kind === "delete" ? "created" : "replaced"} route ${routeId}, which the managed server no longer has: nothing was changed`,
        ),
    });
    if (restoreId === undefined) throw new Error("a restore that applied has no change record");
    return { change_id: restoreId, restored_from: row.id, action, route: result.route };
  }

  /** Creates or replaces a route the agent itself owns (the operator's), bypassing the API's guard. */
  async put(route: RouteJson & { "@id": string }): Promise<RouteJson | null> {
    const { result } = await this.change(
      "put",
      route["@id"],
      { kind: "put", route },
      {
        callbackUrl: undefined,
        ctx: { requestId: null },
      },
    );
    return result.previous;
  }

  /**
   * Brings a Caddy the agent finds (adopted, or configured by an earlier version) in line with the
   * connection settings: every route's `reverse_proxy` handlers get the configured `stream_close_delay`,
   * and Caddy's HTTP app its `grace_period`, each as one config change made only when something differs.
   * Not a route change of the API: no history, no events, one log line. A failure is logged and the agent
   * starts anyway; every route the agent writes later gets the delay with its change.
   */
  conformCaddy(): Promise<void> {
    this.conforming = this.conformNow();
    return this.conforming;
  }

  /** Resolves once the start's `conformCaddy` has ended, however it ended. */
  whenConformed(): Promise<void> {
    return this.conforming;
  }

  private async conformNow(): Promise<void> {
    const delay = this.o.streamCloseDelayMs;
    const grace = this.o.gracePeriodMs > 0 ? caddyDuration(this.o.gracePeriodMs) : undefined;
    try {
      // Looked at first without holding the writer: a Caddy already in line (every start but the first)
      // costs two reads, and a slow one holds up no route change.
      const due = await this.o.writer.peek(async (caddy) => {
        const [routesText, graceDiffers] = await Promise.all([
          caddy.text(),
          grace === undefined ? false : caddy.httpAppFieldDiffers("grace_period", grace),
        ]);
        return !routesHaveDelay(routesText, delay) || graceDiffers;
      });
      if (!due) return;
      const done = await this.o.writer.exclusive(async (caddy) => ({
        routes: await caddy.conform(
          (r) => withStreamCloseDelay(r, delay),
          (text) => routesHaveDelay(text, delay),
        ),
        grace: grace !== undefined && (await caddy.setHttpAppField("grace_period", grace)),
      }));
      if (done.routes > 0 || done.grace)
        this.o.log.info(
          {
            routes_updated: done.routes,
            stream_close_delay: delay === 0 ? null : caddyDuration(delay),
            ...(done.grace ? { grace_period: grace } : {}),
          },
          "brought Caddy's routes and HTTP app in line with the connection settings",
        );
    } catch (err) {
      this.o.log.warn(
        { err },
        "could not apply stream_close_delay and grace_period to Caddy's config at start; routes get the delay when they are next written",
      );
    }
  }

  private async find(routeId: string): Promise<RouteJson | undefined> {
    const route = await proxied(() => this.o.writer.route(routeId));
    const view = this.o.display;
    return route && view?.active() ? view.show(route) : route;
  }

  private view(r: ChangeRow): ChangeView {
    return {
      change_id: r.id,
      route_id: r.route_id,
      operation: r.operation,
      outcome: r.outcome === "pending" && !this.inFlight.has(r.id) ? "interrupted" : r.outcome,
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

  private checkCallbackUrl(callbackUrl: string | null | undefined): void {
    if (callbackUrl === undefined || callbackUrl === null) return;
    const p = callbackUrlProblem(callbackUrl, this.o.deny);
    if (p) throw validationFailed([{ field: "body.callback_url", message: p }]);
  }

  private guardOperator(routeId: string): void {
    if (this.o.operatorRouteId !== undefined && routeId === this.o.operatorRouteId)
      throw new ApiError(
        "operator_route_immutable",
        `${routeId} is the operator's route; the agent manages it and the API cannot change it`,
      );
  }

  /**
   * One change through the writer. Its record and `route_backup` event are written in one transaction
   * before Caddy is touched; its outcome and `route_change` event in one transaction once it settled. Both
   * events carry the route's ordering key for the receiver, so the outbox delivers the backup first.
   */
  private async change(
    operation: ChangeOperation,
    id: string,
    op: Op,
    { callbackUrl, ctx, restoredFrom, conflict }: ChangeOptions,
  ): Promise<{ result: ChangeResult & { ok: true }; changeId: number | undefined }> {
    const started = performance.now();
    // Every route the agent writes, whoever asked (the API, a restore, the operator's switch), keeps its
    // upgraded streams across reloads for the configured delay.
    if (op.kind !== "delete")
      op = { ...op, route: withStreamCloseDelay(op.route, this.o.streamCloseDelayMs) };
    let changeId: number | undefined;
    const firstAttempts: Promise<boolean>[] = [];
    const requested = op.kind === "delete" ? null : JSON.stringify(op.route);
    const orderingKey = callbackUrl === undefined ? undefined : routeEventKey(id, callbackUrl);
    const about = {
      operation,
      route_id: id,
      ...(restoredFrom === undefined ? {} : { restored_from: restoredFrom }),
      request_id: ctx.requestId,
    };
    const result: ChangeResult = await this.o.writer.submit({
      op,
      prepare: (previous) => {
        const now = new Date().toISOString();
        const prev = previous === null ? null : JSON.stringify(previous);
        const written = this.o.db.transaction(() => {
          let cid = changeId;
          if (cid === undefined)
            cid = Number(
              this.insertChange.run({
                operation,
                route_id: id,
                previous: prev,
                requested,
                requested_at: now,
                request_id: ctx.requestId,
                restored_from: restoredFrom ?? null,
              }).lastInsertRowid,
            );
          else this.updatePrevious.run(prev, cid);
          if (callbackUrl === undefined) return { cid, ev: null };
          const ev = this.o.outbox.add({
            type: "route_backup",
            url: callbackUrl,
            orderingKey,
            data: { ...about, change_id: cid, previous_route: previous, captured_at: now },
          });
          this.setBackupEvent.run(ev, cid);
          return { cid, ev };
        })();
        changeId = written.cid;
        this.inFlight.add(written.cid);
        // Started before Caddy is touched but not awaited: the writer holds every queued change meanwhile,
        // so one slow receiver would hold up the changes of every other request.
        if (written.ev)
          firstAttempts.push(this.o.outbox.deliverNow(written.ev, this.o.firstAttemptTimeoutMs));
      },
    });
    const outcome = settledOutcome(result);
    // Counted here rather than with the record: a change Caddy was unreachable for fails before it has one.
    this.o.metrics?.routeChanges.inc({ operation, outcome });
    let changeEvent: string | null = null;
    if (changeId !== undefined)
      changeEvent = this.settle(changeId, result, outcome, callbackUrl, orderingKey, about);
    this.logChange(op, result, outcome, about, changeId, performance.now() - started);
    // The answer waits (each bounded by the attempt's time-out) for this change's own first attempts, the
    // backup's and then the outcome's, so a receiver that answers in time has both by the time the caller
    // learns the outcome. The outcome's attempt starts once the backup's has ended: the ordering key lets it
    // start only then (and not at all while an earlier event of the route to that receiver is pending).
    await Promise.all(firstAttempts);
    if (changeEvent) await this.o.outbox.deliverNow(changeEvent, this.o.firstAttemptTimeoutMs);
    if (!result.ok) {
      const { kind } = result.failure;
      if (conflict && (kind === "exists" || kind === "not_found")) throw conflict(kind);
      throw failureToError(result.failure, id, result.previous);
    }
    return { result, changeId };
  }

  /**
   * The one line a change leaves in the log: what it was, the upstreams it wrote (or, for a removal, those
   * of the route it removed), how it ended, with how many changes it went to Caddy, how long it took from
   * the request to its outcome, and the request id the caller gave (or the agent generated).
   */
  private logChange(
    op: Op,
    result: ChangeResult,
    outcome: SettledOutcome,
    about: { operation: ChangeOperation; route_id: string; request_id: string | null },
    changeId: number | undefined,
    ms: number,
  ): void {
    const error = failureText(result);
    const fields = {
      ...about,
      change_id: changeId ?? null,
      upstreams: upstreamsOf(op.kind === "delete" ? result.previous : op.route),
      outcome,
      batch_size: result.batchSize,
      duration_ms: Math.round(ms * 10) / 10,
      ...(error === null ? {} : { error }),
    };
    const line = `route ${about.route_id}: ${about.operation} ${outcome}`;
    if (result.ok || outcome === "refused") this.o.log.info(fields, line);
    else this.o.log.warn(fields, line);
  }

  /** Records how a change ended, with its `route_change` event when it has a callback; returns the event's id. */
  private settle(
    changeId: number,
    result: ChangeResult,
    outcome: SettledOutcome,
    callbackUrl: string | undefined,
    orderingKey: string | undefined,
    about: Record<string, unknown>,
  ): string | null {
    const error = failureText(result);
    const finishedAt = new Date().toISOString();
    try {
      return this.o.db.transaction(() => {
        this.finishChange.run(outcome, error, finishedAt, changeId);
        if (callbackUrl === undefined) return null;
        const ev = this.o.outbox.add({
          type: "route_change",
          url: callbackUrl,
          orderingKey,
          data: {
            ...about,
            change_id: changeId,
            outcome: eventOutcome(outcome),
            route: routeAfter(result),
            error: error === null ? null : withoutPaths(error),
            finished_at: finishedAt,
          },
        });
        this.setChangeEvent.run(ev, changeId);
        return ev;
      })();
    } finally {
      this.inFlight.delete(changeId);
    }
  }
}

/** The change a restore of `row` makes; see `RouteService.restore`. */
function restorePlan(row: ChangeRow): RestorePlan {
  const previous = parseRoute(row.previous);
  const id = row.route_id;
  if (previous === null) return { op: { kind: "delete", id }, action: "removed" };
  if (previous["@id"] !== id) throw new Error(`the state captured by change ${row.id} is not route ${id}`);
  const route = previous as RouteJson & { "@id": string };
  if (row.requested === null) return { op: { kind: "create", route }, action: "recreated" };
  return { op: { kind: "replace", id, route }, action: "replaced" };
}
