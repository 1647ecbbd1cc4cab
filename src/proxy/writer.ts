import type { Readable } from "node:stream";
import type { Logger } from "pino";
import type { CaddyAdmin } from "../caddy/admin.js";
import { CaddyConfigFields, type ConfigField } from "../caddy/config-fields.js";
import type { Metrics } from "../metrics/metrics.js";
import { CaddyRoutes, type CaddyRoutesOptions } from "./caddy-routes.js";
import { GatherWindow, type GatherWindowOptions } from "./gather-window.js";
import type { RouteJson } from "./plan.js";
import {
  type Capture,
  type ChangeResult,
  type Pending,
  type WriterChange,
  WriteSteps,
} from "./write-step.js";

export type { ChangeResult, WriteFailure, WriterChange } from "./write-step.js";

/**
 * A change that finds the writer idle waits at most 10% of what the last write took (140 ms at 20,000
 * routes, 7 ms at 1,000, none at a couple of hundred) and 10 ms (or a quarter of that) past the last change
 * that joined it: a burst's changes reach the writer about 1 ms apart, each request's own handling.
 * HOSTKEEPER_ROUTE_GATHER_MAX_MS sets `maxMs`.
 */
export const GATHER: GatherWindowOptions = { share: 0.1, maxMs: 250, quietMs: 10 };

export interface WriterOptions<C extends WriterChange> extends CaddyRoutesOptions {
  /** Where the state each change replaces is recorded before Caddy is touched. */
  journal: Capture<C>;
  log: Logger;
  /** Upper bound of changes sent to Caddy as one config change. */
  maxBatch?: number;
  /** How long a change that finds the writer idle waits for others (see GatherWindow); default `GATHER`. */
  gather?: GatherWindowOptions;
  metrics?: Metrics;
}

/** What a Caddy found at start must be brought in line with (see `RouteWriter.conform`). */
export interface Conformance {
  /** Whether Caddy's text of the routes surely needs no change: spares parsing every route. */
  routesConform(text: string): boolean;
  /** The route as it must be; the route itself when it needs no change. */
  conformRoute(route: RouteJson): RouteJson;
  /** Fields of Caddy's config outside the routes, in the order they are written (see `ConfigField`). */
  fields: readonly ConfigField[];
}

/**
 * The one writer of the managed server's routes. Changes queue up while a write is under way and the
 * next write takes all of them as one Caddy config change (Caddy reloads its whole config per change, so a
 * batch costs what one change costs); a change that arrives while the writer is idle waits a moment for
 * others to go with it, as long as that is small beside what a write costs (GatherWindow). Every
 * write carries If-Match, is verified by Caddy's answer to it (see CaddyRoutes.written), and is undone
 * when it fails after Caddy may have changed (see WriteSteps). Data goes one way: a change comes in with
 * `submit`, the journal records what it replaces, Caddy gets it, and the answer goes back to the caller.
 */
export class RouteWriter<C extends WriterChange = WriterChange> {
  private readonly queue: Pending<C>[] = [];
  private busy = false;
  /** A change was written: the routes' new ETag still has to be read. */
  private refreshDue = false;
  private idleWaiters: (() => void)[] = [];
  /** Work that needs the routes to itself (see `exclusive`), run between batches. */
  private readonly chores: (() => Promise<void>)[] = [];
  private readonly caddy: CaddyRoutes;
  private readonly fields: CaddyConfigFields;
  private readonly steps: WriteSteps<C>;
  private readonly maxBatch: number;
  private readonly gather: GatherWindow;
  /** Changes submitted so far: what the gather window watches for. */
  private arrivals = 0;

  constructor(
    admin: CaddyAdmin,
    private readonly opts: WriterOptions<C>,
  ) {
    this.caddy = new CaddyRoutes(admin, opts);
    this.fields = new CaddyConfigFields(admin);
    this.steps = new WriteSteps(this.caddy, opts.journal, opts.log);
    this.maxBatch = opts.maxBatch ?? 500;
    this.gather = new GatherWindow(opts.gather ?? GATHER);
  }

  submit(change: C): Promise<ChangeResult> {
    return new Promise((resolve) => {
      this.queue.push({ change, answer: resolve, batchSize: 0, previous: null });
      this.arrivals++;
      void this.drain();
    });
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

  /**
   * Brings the fields of `c` and every route in line with it, each field and the routes as one config
   * change made only when it differs (the fields first: the local CA's trust is set before anything can
   * issue); returns the paths of the fields written and how many routes changed. Looked at first without
   * holding the writer: a Caddy already in line (every start but the first) costs a few small reads and
   * one of the routes, and a slow one holds up no route change. The change itself runs between batches,
   * with the routes to itself.
   */
  async conform(c: Conformance): Promise<{ routes: number; fields: string[] }> {
    const [text, differing] = await Promise.all([this.caddy.text(), this.fields.differing(c.fields)]);
    if (c.routesConform(text) && differing.length === 0) return { routes: 0, fields: [] };
    return this.exclusive(async () => {
      const fields = await this.fields.conform(c.fields);
      const routes = await this.caddy.conform(
        (r) => c.conformRoute(r),
        (t) => c.routesConform(t),
      );
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
      // A change that found the writer idle: the changes of the same burst go to Caddy with it.
      // Without a window it goes in this same turn: not even a microtask lets later changes in ahead of it.
      if (this.queue.length > 0 && this.chores.length === 0 && this.gather.boundMs() > 0)
        await this.gather.gather(() => this.arrivals);
      while (this.queue.length > 0 || this.refreshDue || this.chores.length > 0) await this.next();
    } finally {
      this.busy = false;
      if (this.queue.length === 0 && this.chores.length === 0)
        for (const resolve of this.idleWaiters.splice(0)) resolve();
    }
  }

  /** One turn of the writer: a chore, else the batch of queued changes, else the read after a write. */
  private async next(): Promise<void> {
    const chore = this.chores.shift();
    if (chore) {
      await chore();
      this.caddy.forget();
      return;
    }
    if (this.queue.length === 0) {
      // The routes' ETag is read after a change was verified and answered, so the next change starts
      // from a known state without the answer waiting for a read of every route.
      this.refreshDue = false;
      await this.caddy.refresh();
      return;
    }
    const batch = this.queue.splice(0, this.maxBatch);
    this.opts.metrics?.routeWriteBatchSize.observe(batch.length);
    const started = performance.now();
    try {
      if (await this.steps.run(batch)) {
        this.refreshDue = true;
        this.gather.wrote(performance.now() - started);
      }
    } catch (err) {
      this.opts.log.error({ err }, "route writer failed unexpectedly");
      this.caddy.forget();
      const failure = { kind: "unavailable" as const, message: (err as Error).message };
      for (const p of batch) p.answer({ ok: false, previous: p.previous, failure, batchSize: p.batchSize });
    }
  }
}
