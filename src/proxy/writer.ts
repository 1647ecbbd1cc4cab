import type { Readable } from "node:stream";
import type { Logger } from "pino";
import { type CaddyAdmin, CaddyApiError, CaddyUnavailableError } from "../caddy/admin.js";
import type { Metrics } from "../metrics/metrics.js";
import { canonicalJson } from "../util/canonical-json.js";
import { CaddyRoutes, type CaddyRoutesOptions, type RoutesState } from "./caddy-routes.js";
import { type Op, type Plan, plan, type RouteJson } from "./plan.js";
import { sameRoute } from "./streams.js";

export interface ChangeRequest {
  op: Op;
  /**
   * Runs once the change is planned and before Caddy is touched, with the state the change replaces (null
   * when there was none). It runs again only if a re-plan changes that state. A throw drops the change.
   */
  prepare?: (previous: RouteJson | null) => Promise<void> | void;
}

export type WriteFailure =
  | { kind: "exists" | "not_found" }
  /** Caddy could not be reached; nothing was changed. */
  | { kind: "unavailable"; message: string }
  /** Caddy refused the new config and kept the old one. */
  | { kind: "rejected"; message: string }
  /** The change failed after Caddy may have changed, and the captured state was put back. */
  | { kind: "rolled_back"; message: string }
  /** The change failed and putting the captured state back failed too. */
  | { kind: "rollback_failed"; message: string }
  /** `prepare` threw. */
  | { kind: "prepare_failed"; message: string };

/**
 * How a change ended. `batchSize`: how many changes went to Caddy in the same config write as this one
 * (the last write that carried it), 0 when it never reached Caddy (a 404/409, Caddy unreachable).
 */
export type ChangeResult = (
  | { ok: true; previous: RouteJson | null; route: RouteJson | null }
  | { ok: false; previous: RouteJson | null; failure: WriteFailure }
) & { batchSize: number };

/** A result as the writer's steps produce it; `submit` adds the batch size. */
type StepResult = DistributiveOmit<ChangeResult, "batchSize">;
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

interface Pending {
  req: ChangeRequest;
  resolve: (r: StepResult) => void;
  batchSize: number;
  /** Canonical JSON of the previous state `prepare` last saw. */
  preparedWith?: string;
  previous: RouteJson | null;
}

export interface WriterOptions extends CaddyRoutesOptions {
  log: Logger;
  /** Upper bound of changes sent to Caddy as one config change. */
  maxBatch?: number;
  metrics?: Metrics;
}

/** Changes taken to Caddy together, and whether an If-Match failure may still re-read and re-apply them. */
interface Step {
  changes: Pending[];
  mayRetry: boolean;
}

/**
 * The one writer of the managed server's routes. Changes queue up while a write is under way and the
 * next write takes all of them as one Caddy config change (Caddy reloads its whole config per change, so a
 * batch costs what one change costs); a change that arrives while the writer is idle goes at once. Every
 * write carries If-Match, is verified by Caddy's answer to it (see CaddyRoutes.written), and is undone
 * when it fails after Caddy may have changed.
 */
export class RouteWriter {
  private readonly queue: Pending[] = [];
  private busy = false;
  /** A change was written: the routes' new ETag still has to be read. */
  private refreshDue = false;
  private idleWaiters: (() => void)[] = [];
  /** Work that needs the routes to itself (see `exclusive`), run between batches. */
  private readonly chores: (() => Promise<void>)[] = [];
  private readonly caddy: CaddyRoutes;
  private readonly maxBatch: number;

  constructor(
    readonly admin: CaddyAdmin,
    private readonly opts: WriterOptions,
  ) {
    this.caddy = new CaddyRoutes(admin, opts);
    this.maxBatch = opts.maxBatch ?? 500;
  }

  submit(req: ChangeRequest): Promise<ChangeResult> {
    return new Promise((resolve) => {
      const pending: Pending = {
        req,
        resolve: (r) => resolve({ ...r, batchSize: pending.batchSize }),
        batchSize: 0,
        previous: null,
      };
      this.queue.push(pending);
      void this.drain();
    });
  }

  /**
   * Runs `fn` with Caddy's routes to itself: after the batch under way, before the changes queued behind
   * it. The last known state is dropped afterwards, as `fn` may have changed the routes.
   */
  exclusive<T>(fn: (caddy: CaddyRoutes) => Promise<T>): Promise<T> {
    return new Promise((resolve, reject) => {
      this.chores.push(() => fn(this.caddy).then(resolve, reject));
      void this.drain();
    });
  }

  /** Runs reads of `fn` now, beside whatever the writer does: for looking, never for writing. */
  peek<T>(fn: (caddy: CaddyRoutes) => Promise<T>): Promise<T> {
    return fn(this.caddy);
  }

  /** Resolves once no change is queued or under way and the post-answer read is done. */
  whenIdle(): Promise<void> {
    if (!this.busy && this.queue.length === 0 && this.chores.length === 0 && !this.refreshDue)
      return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** The managed server's routes, read from Caddy now (not queued behind changes), as Caddy's own JSON text. */
  routesText(): Promise<string> {
    return this.caddy.text();
  }

  /** The same as `routesText`, as Caddy's bytes passed on while they arrive. */
  routesStream(): Promise<Readable | string> {
    return this.caddy.stream();
  }

  /** One route of the managed server, read from Caddy now; undefined when it has none with that id. */
  route(id: string): Promise<RouteJson | undefined> {
    return this.caddy.route(id);
  }

  private async drain(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      while (this.queue.length > 0 || this.refreshDue || this.chores.length > 0) {
        const chore = this.chores.shift();
        if (chore) {
          await chore();
          this.caddy.forget();
          continue;
        }
        if (this.queue.length === 0) {
          // The routes' ETag is read after a change was verified and answered, so the next change starts
          // from a known state without the answer waiting for a read of every route.
          this.refreshDue = false;
          await this.caddy.refresh();
          continue;
        }
        const batch = this.queue.splice(0, this.maxBatch);
        this.opts.metrics?.routeWriteBatchSize.observe(batch.length);
        try {
          await this.apply(batch);
        } catch (err) {
          this.opts.log.error({ err }, "route writer failed unexpectedly");
          this.caddy.forget();
          for (const p of batch)
            p.resolve({
              ok: false,
              previous: p.previous,
              failure: { kind: "unavailable", message: (err as Error).message },
            });
        }
      }
    } finally {
      this.busy = false;
      if (this.queue.length === 0 && this.chores.length === 0)
        for (const resolve of this.idleWaiters.splice(0)) resolve();
    }
  }

  /**
   * Takes a batch to Caddy and answers every change in it. A step that cannot answer its changes yet puts
   * them back at the front of `steps`: to re-plan them on a fresh read, or as two halves when Caddy
   * refused them together, so each half is answered before the next step starts.
   */
  private async apply(batch: Pending[]): Promise<void> {
    const steps: Step[] = [{ changes: batch, mayRetry: true }];
    while (steps.length > 0) {
      const { changes, mayRetry } = steps.shift() as Step;
      const ops = changes.map((x) => x.req.op);
      let known: { state: RoutesState; cached: boolean };
      let elsewhere: Set<string>;
      try {
        known = await this.caddy.current();
        elsewhere = await this.caddy.idsElsewhere(ops, known.state);
      } catch (err) {
        this.caddy.forget();
        this.failAll(changes, failureOf(err));
        continue;
      }
      const { state } = known;
      // A 404 or 409, or a change that changes nothing, never reaches Caddy, so no If-Match would catch a
      // stale cache: confirm it on a fresh read.
      const first = plan(state.routes, ops, elsewhere, state.index);
      if (known.cached && (first.outcomes.some((o) => !o.ok) || changesNothing(first))) {
        this.caddy.forget();
        steps.unshift({ changes, mayRetry });
        continue;
      }

      const { live, p } = await this.planAndPrepare(changes, state, elsewhere, first);
      // Every reload closes idle keep-alive connections (and, without stream_close_delay, streams): a
      // change that leaves every route as Caddy holds it is answered without one.
      if (p.applied.length === 0 || changesNothing(p)) {
        this.settle(live, p);
        continue;
      }

      for (const a of p.applied) {
        const pending = live[a.index];
        if (pending) pending.batchSize = p.applied.length;
      }
      const written = await this.caddy.write(state, p);
      if (written.kind === "stale") {
        if (mayRetry) steps.unshift({ changes: live, mayRetry: false });
        else
          this.failApplied(live, p, {
            kind: "unavailable",
            message: "Caddy's config kept changing under the agent (If-Match failed twice)",
          });
        continue;
      }
      if (written.kind === "refused") {
        if (p.applied.length > 1)
          steps.unshift(...halves(live, p).map((h) => ({ changes: h, mayRetry: true })));
        else this.failApplied(live, p, { kind: "rejected", message: written.message });
        continue;
      }
      if (written.kind === "not_sent") {
        this.failApplied(live, p, { kind: "unavailable", message: written.message });
        continue;
      }
      if (written.kind === "uncertain") {
        this.failApplied(
          live,
          p,
          await this.restore(state, `the change did not complete: ${written.message}`),
        );
        continue;
      }

      // Verified by Caddy's answer (see CaddyRoutes.written). The routes' new ETag is read once the answers
      // are out, before the writer touches Caddy again.
      this.caddy.written(p);
      this.refreshDue = true;
      this.settle(live, p);
    }
  }

  /**
   * Runs `prepare` for every change of plan `first` that will apply, and plans again without the changes
   * whose prepare failed, until none fails.
   */
  private async planAndPrepare(
    changes: Pending[],
    state: RoutesState,
    elsewhere: Set<string>,
    first: Plan,
  ): Promise<{ live: Pending[]; p: Plan }> {
    let live = changes;
    for (let p = first; ; ) {
      const dropped: Pending[] = [];
      await Promise.all(
        live.map(async (pending, i) => {
          const outcome = p.outcomes[i];
          pending.previous = outcome?.ok ? outcome.previous : null;
          if (!outcome?.ok || !pending.req.prepare) return;
          const seen = canonicalJson(outcome.previous);
          if (pending.preparedWith === seen) return;
          try {
            await pending.req.prepare(outcome.previous);
            pending.preparedWith = seen;
          } catch (err) {
            dropped.push(pending);
            pending.resolve({
              ok: false,
              previous: outcome.previous,
              failure: { kind: "prepare_failed", message: (err as Error).message },
            });
          }
        }),
      );
      if (dropped.length === 0) return { live, p };
      live = live.filter((x) => !dropped.includes(x));
      p = plan(
        state.routes,
        live.map((x) => x.req.op),
        elsewhere,
        state.index,
      );
    }
  }

  /** Every change gets its planned outcome. */
  private settle(live: Pending[], p: Plan): void {
    live.forEach((pending, i) => {
      const o = p.outcomes[i];
      if (!o) return;
      if (o.ok) pending.resolve({ ok: true, previous: o.previous, route: o.route });
      else pending.resolve({ ok: false, previous: null, failure: { kind: o.reason } });
    });
  }

  private failAll(changes: Pending[], failure: WriteFailure): void {
    for (const pending of changes) pending.resolve({ ok: false, previous: pending.previous, failure });
  }

  /** The applied changes fail with `failure`; the others keep their planned 404/409. */
  private failApplied(live: Pending[], p: Plan, failure: WriteFailure): void {
    live.forEach((pending, i) => {
      const o = p.outcomes[i];
      if (!o) return;
      if (o.ok) pending.resolve({ ok: false, previous: o.previous, failure });
      else pending.resolve({ ok: false, previous: null, failure: { kind: o.reason } });
    });
  }

  /** Puts the captured routes back after a change failed; the failure says whether that worked. */
  private async restore(before: RoutesState, why: string): Promise<WriteFailure> {
    this.opts.log.warn({ why }, "route change failed; restoring the captured state");
    try {
      await this.caddy.restore(before);
      return { kind: "rolled_back", message: `${why}; the previous routes were restored` };
    } catch (err) {
      this.opts.log.error({ err, why }, "restoring the captured routes failed");
      return {
        kind: "rollback_failed",
        message: `${why}; restoring the previous routes failed too: ${(err as Error).message}`,
      };
    }
  }
}

/**
 * Splits a batch Caddy refused in two, so only the changes it refuses on their own fail. Changes that did
 * not apply (404/409) are re-planned with their neighbours: the cut falls between applied ones.
 */
function halves(live: Pending[], p: Plan): [Pending[], Pending[]] {
  const appliedIdx = new Set(p.applied.map((a) => a.index));
  const positions = live.map((_, i) => i).filter((i) => appliedIdx.has(i));
  const cut = positions[Math.floor(positions.length / 2)] ?? Math.ceil(live.length / 2);
  return [live.slice(0, cut), live.slice(cut)];
}

/** Whether every applied change of the plan puts back a route exactly as Caddy holds it. */
function changesNothing(p: Plan): boolean {
  return (
    p.applied.length > 0 &&
    p.applied.every(({ index, op }) => {
      const o = p.outcomes[index];
      return op.kind !== "delete" && o?.ok === true && o.previous !== null && sameRoute(o.previous, o.route);
    })
  );
}

function failureOf(err: unknown): WriteFailure {
  if (err instanceof CaddyUnavailableError) return { kind: "unavailable", message: err.message };
  if (err instanceof CaddyApiError)
    return { kind: "unavailable", message: `Caddy answered ${err.status}: ${err.message}` };
  return { kind: "unavailable", message: (err as Error).message };
}
