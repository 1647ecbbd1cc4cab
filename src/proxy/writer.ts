import { setImmediate } from "node:timers/promises";
import type { Logger } from "pino";
import { CaddyApiError } from "../caddy/admin.js";
import type { CaddyConfigFields, ConfigField } from "../caddy/config-fields.js";
import type { RoutesStore } from "../caddy/routes/caddy-routes.js";
import type { LeadingRoute } from "../caddy/routes/leading-route.js";
import type { ChangeEnd, Op, RouteJson } from "../caddy/routes/plan.js";
import type { Metrics } from "../metrics/metrics.js";
import { GatherWindow, type GatherWindowOptions } from "./gather-window.js";
import type { ChangeJournal, RecordedChange } from "./journal.js";
import { type Pending, WriteSteps } from "./write-step.js";

/**
 * The first change of a batch waits, counted from its arrival, at most a tenth of what the last write took
 * (never past `maxMs`) and `quietMs` (or a quarter of that bound) past the last change that joined it. Where
 * Caddy's reload is slow the wait is small beside it and gathers a whole burst, whose changes arrive apart
 * by no more than each request's own handling; where the reload is quick there is next to no wait. One that
 * waited that long already (behind a write) goes at once.
 * HOSTKEEPER_ROUTE_GATHER_MAX_MS sets `maxMs`.
 */
export const GATHER: GatherWindowOptions = { share: 0.1, maxMs: 250, quietMs: 10 };

/**
 * How a change ended, as its submitter gets it: its outcome and the route it replaced, with how many changes
 * went to Caddy in the write that carried it (0 when none did) and the id of its record (none when it never
 * got one: Caddy unreachable, a 404/409).
 */
export type ChangeAnswer = ChangeEnd & { batchSize: number; changeId: number | undefined };

export interface WriterOptions {
  /** Where each change's record is kept: the state it replaces before Caddy is touched, how it ended after. */
  journal: Pick<ChangeJournal, "capture" | "settle" | "together">;
  /** Caddy's config outside the routes, which `conform` brings in line. */
  config: CaddyConfigFields;
  log: Logger;
  /** Upper bound of changes sent to Caddy as one config change. */
  maxBatch?: number;
  /** How long a change that finds the writer idle waits for others (see GatherWindow); default `GATHER`. */
  gather?: GatherWindowOptions;
  metrics?: Metrics;
  /** Config that follows the routes (the access logs), kept in line around each batch. */
  hooks?: BatchHooks;
  /** The route kept ahead of all others (the HTTPS redirect): made again by the batches that touch it. */
  lead?: LeadingRoute;
}

/**
 * Config outside the routes that follows what the routes hold (the access logs: access-logs/keeper.ts). What
 * a batch's routes need is added before they are written, so they work from their first request; what
 * routes no longer need is taken away once no change is queued, so a burst pays for it once.
 */
export interface BatchHooks {
  /** Whether `op` needs anything of `before`; a batch without such ops costs nothing. */
  needs(op: Op): boolean;
  /** Adds what the batch's ops need; true when a follow-up is due (see `idle`). Throws when it could not. */
  before(ops: readonly Op[]): Promise<boolean>;
  /** Whether the batch's changes, done, leave something to take away (`previous`: what each replaced). */
  after(changes: readonly { op: Op; previous: RouteJson | null }[]): boolean;
  /** Brings everything in line with the routes Caddy holds; run between batches, with the routes to itself. */
  idle(): Promise<void>;
}

/** What a Caddy found at start must be brought in line with (see `RouteWriter.conform`). */
export interface Conformance {
  /** Whether Caddy's text of the routes surely needs no change: spares parsing every route. */
  routesConform(text: string): boolean;
  /** The route as it must be; the route itself when it needs no change. */
  conformRoute(route: RouteJson): RouteJson;
  /** Fields of Caddy's config outside the routes, in the order they are written (see `ConfigField`). */
  fields: readonly ConfigField[];
  /** The route that must lead all others, or none (leading-route.ts). */
  lead?: LeadingRoute;
}

/**
 * The one writer of the managed server's routes. Changes queue up while a write is under way and the
 * next write takes all of them as one Caddy config change (Caddy reloads its whole config per change, so a
 * batch costs what one change costs); a change that arrives while the writer is idle waits a moment for
 * others to go with it, as long as that is small beside what a write costs (GatherWindow). Every
 * write carries If-Match, is verified by Caddy's answer to it, and is undone when it fails after Caddy may
 * have changed (see WriteSteps). Data goes one way: a change comes in with `submit`, the journal records
 * what it replaces, Caddy gets it, the journal records how it ended, and the answer goes back to the caller.
 */
export class RouteWriter {
  private readonly queue: Pending[] = [];
  private busy = false;
  /** A change was written: the routes' new ETag still has to be computed (or read). */
  private refreshDue = false;
  private idleWaiters: (() => void)[] = [];
  /** Work that needs the routes to itself (see `exclusive`), run between batches. */
  private readonly chores: (() => Promise<void>)[] = [];
  private readonly steps: WriteSteps;
  private readonly maxBatch: number;
  private readonly gather: GatherWindow;
  /** Changes submitted so far: what the gather window watches for. */
  private arrivals = 0;
  /** The hooks' `idle` is due once no change is queued. */
  private followUpDue = false;
  /** The first queued change waits for others (see `next`): one arriving now has its id looked up meanwhile. */
  private gathering = false;

  constructor(
    private readonly routes: RoutesStore,
    private readonly opts: WriterOptions,
  ) {
    this.steps = new WriteSteps(routes, opts.journal, opts.log, opts.lead);
    this.maxBatch = opts.maxBatch ?? 500;
    this.gather = new GatherWindow(opts.gather ?? GATHER);
  }

  /**
   * Takes `change` to Caddy with the changes queued beside it and answers how it ended, once the journal
   * has recorded that (a failure to record it rejects the answer).
   */
  submit(change: RecordedChange): Promise<ChangeAnswer> {
    return new Promise((resolve, reject) => {
      let answered = false;
      const pending: Pending = {
        change,
        batchSize: 0,
        previous: null,
        arrivedAt: performance.now(),
        answer: (end) => {
          if (answered) return;
          answered = true;
          this.opts.journal.settle(change, end, (err) => {
            if (err === undefined) resolve({ ...end, batchSize: pending.batchSize, changeId: change.id });
            else reject(err);
          });
        },
      };
      this.queue.push(pending);
      this.arrivals++;
      if (this.gathering) this.steps.lookUp([pending]);
      void this.drain();
    });
  }

  /** Resolves once no change is queued or under way and the post-answer read is done. */
  whenIdle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private isIdle(): boolean {
    const waiting = this.queue.length > 0 || this.chores.length > 0 || this.refreshDue || this.followUpDue;
    return !this.busy && !waiting;
  }

  /**
   * Brings the config that follows the routes in line with them (the hooks' `idle`) between batches, with
   * the routes to itself: at start, and on a timer. `then` runs after it, still before any change (a
   * failure of the hooks is logged; one of `then` is the caller's).
   */
  followUp(then?: () => Promise<void>): Promise<void> {
    const hooks = this.opts.hooks;
    return this.exclusive(async () => {
      if (hooks) await this.idleHook(hooks);
      await then?.();
    });
  }

  /**
   * Brings the fields of `c` and every route in line with it, each field and the routes as one config
   * change made only when it differs (the fields first: the local CA's trust is set before anything can
   * issue); returns the paths of the fields written and how many routes changed. Looked at first without
   * holding the writer: a Caddy already in line (every start but the first) costs a few small reads and
   * one of the routes, and a slow one holds up no route change. The change itself runs between batches,
   * with the routes to itself.
   */
  async conform(c: Conformance): Promise<{ routes: number; fields: string[] }> {
    const config = this.opts.config;
    const inLine = (t: string) => c.routesConform(t) && (c.lead?.settledIn(t) ?? true);
    const [text, differing] = await Promise.all([this.routes.text(), config.differing(c.fields)]);
    if (inLine(text) && differing.length === 0) return { routes: 0, fields: [] };
    return this.exclusive(async () => {
      const fields = await config.conform(c.fields);
      const routes = await this.routes.conform((r) => c.conformRoute(r), inLine, c.lead);
      return { routes, fields };
    });
  }

  /**
   * Runs `fn` with Caddy's routes to itself: after the batch under way, before the changes queued behind
   * it. The last known state is dropped afterwards, as `fn` may have changed the routes.
   */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    return new Promise((resolve, reject) => {
      this.chores.push(() => fn().then(resolve, reject));
      void this.drain();
    });
  }

  private async drain(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      while (this.queue.length > 0 || this.refreshDue || this.chores.length > 0 || this.followUpDue)
        await this.next();
    } finally {
      this.busy = false;
      if (this.isIdle()) for (const resolve of this.idleWaiters.splice(0)) resolve();
    }
  }

  /**
   * One turn of the writer: a chore, else the batch of queued changes, else the hooks' follow-up, else the
   * read after a write.
   */
  private async next(): Promise<void> {
    const chore = this.chores.shift();
    if (chore) {
      await chore();
      this.routes.forget();
      return;
    }
    const hooks = this.opts.hooks;
    if (this.queue.length === 0 && this.followUpDue && hooks) {
      this.followUpDue = false;
      await this.idleHook(hooks);
      return;
    }
    if (this.queue.length === 0) {
      // The routes' ETag is computed (or read) after a change was verified and answered, so the next change
      // starts from a known state without the answer waiting for it: at the largest hosts that computation
      // would otherwise lengthen every answer.
      this.refreshDue = false;
      await setImmediate();
      await this.routes.refresh();
      return;
    }
    // The first change waits for the rest of its burst, counted from its arrival: a burst that finds the
    // writer idle, or reading the routes after a write, goes to Caddy as one change. Without a window left it
    // goes in this same turn: not even a microtask lets a chore in ahead of it.
    const waited = performance.now() - (this.queue[0]?.arrivedAt ?? 0);
    if (this.chores.length === 0 && this.gather.leftMs(waited) > 0) {
      // Caddy is asked about the ids the burst's creates would take while it gathers, not after.
      this.steps.lookUp(this.queue);
      this.gathering = true;
      await this.gather.gather(() => this.arrivals, waited);
      this.gathering = false;
      if (this.chores.length > 0) return;
    }
    const batch = await this.prepared(this.queue.splice(0, this.maxBatch));
    if (batch.length === 0) return;
    this.opts.metrics?.routeWriteBatchSize.observe(batch.length);
    const started = performance.now();
    try {
      const wrote = await this.steps.run(batch);
      if (hooks?.after(batch.map((p) => ({ op: p.change.op, previous: p.previous }))))
        this.followUpDue = true;
      if (wrote) {
        this.refreshDue = true;
        this.gather.wrote(performance.now() - started);
      }
    } catch (err) {
      this.opts.log.error({ err }, "route writer failed unexpectedly");
      this.routes.forget();
      const outcome = { kind: "unavailable" as const, message: (err as Error).message };
      this.opts.journal.together(() => {
        for (const p of batch) p.answer({ outcome, previous: p.previous });
      });
    }
  }

  /**
   * The batch once what its changes need besides their routes is in Caddy (the hooks' `before`). When that
   * fails, the changes that needed it are answered with the failure and the others go on.
   */
  private async prepared(batch: Pending[]): Promise<Pending[]> {
    const hooks = this.opts.hooks;
    const needing = hooks ? batch.filter((p) => hooks.needs(p.change.op)) : [];
    if (!hooks || needing.length === 0) return batch;
    try {
      if (await hooks.before(needing.map((p) => p.change.op))) this.followUpDue = true;
      return batch;
    } catch (err) {
      this.opts.log.warn(
        { err },
        "could not prepare Caddy's config for the batch (access logs, on-demand issuance)",
      );
      this.followUpDue = true;
      const outcome =
        err instanceof CaddyApiError
          ? { kind: "rejected" as const, message: err.message }
          : { kind: "unavailable" as const, message: (err as Error).message };
      this.opts.journal.together(() => {
        for (const p of needing) p.answer({ outcome, previous: null });
      });
      return batch.filter((p) => !needing.includes(p));
    }
  }

  private async idleHook(hooks: BatchHooks): Promise<void> {
    try {
      await hooks.idle();
    } catch (err) {
      this.opts.log.warn(
        { err },
        "could not bring Caddy's config that follows the routes in line (access logs, on-demand issuance)",
      );
    }
  }
}
