import type { Readable } from "node:stream";
import type { Logger } from "pino";
import { collectWhenIdle } from "../../util/idle-gc.js";
import type { CaddyAdmin } from "../admin.js";
import { lastLoad } from "../last-load.js";
import {
  CaddyRoutes,
  type CaddyRoutesOptions,
  type RoutesState,
  type RoutesStore,
  type WriteAnswer,
} from "./caddy-routes.js";
import { caddyEtag } from "./etag.js";
import type { LeadingRoute } from "./leading-route.js";
import { opId, type Plan, type RouteJson } from "./plan.js";
import { RoutePositions } from "./route-positions.js";
import { PARSED_KEPT_MS, RoutesCache } from "./routes-cache.js";
import { RoutesSnapshot } from "./routes-snapshot.js";

export interface CachedRoutesOptions extends CaddyRoutesOptions {
  /** How long routes parsed for the next change are kept (PARSED_KEPT_MS); tests shorten it. */
  parsedKeptMs?: number;
  /** Told when a computed ETag proved not to be Caddy's (the store then reads the ETag after each write). */
  log?: Pick<Logger, "warn">;
}

/**
 * The routes store for thousands of routes: `CaddyRoutes` with what it learnt kept between calls. The
 * routes of the last read or verified write are kept for the next change (RoutesCache), their new ETag
 * computed after a write rather than read (etag.ts), each id's last known position kept to read one
 * route alone (RoutePositions), and the last list kept while Caddy loads no other config (RoutesSnapshot).
 * It answers every call as `CaddyRoutes` would: whatever it keeps is dropped whenever it may be stale, and
 * every write's If-Match catches what it missed.
 */
export class CachedRoutes implements RoutesStore {
  private readonly caddy: CaddyRoutes;
  private readonly routesPath: string;
  /** Where each route id was in the routes last parsed or written, kept up to date by `written`. */
  private positions = RoutePositions.none();
  /** The routes as of the last read or verified write; dropped whenever it may be stale. */
  private readonly cache: RoutesCache;
  /** A read of all routes for `route` under way, and the generation it started in. */
  private reading: { generation: number; routes: Promise<RouteJson[]> } | undefined;
  /** Counts the agent's writes to the routes. */
  private generation = 0;
  /** The last list read, sent again while Caddy has loaded no config since. */
  private readonly snapshot = new RoutesSnapshot();
  /**
   * Whether a write's new ETag is computed (etag.ts) rather than read back with all routes. Off for
   * good once Caddy's ETag of routes it read differs from the one computed for them (a config whose text
   * Go writes in a way the agent does not reproduce): each such write would otherwise cost a 412 and a read.
   */
  private computeEtags = true;
  /** A write on a computed ETag met a 412: the next read checks the computation against Caddy's ETag. */
  private checkEtag = false;

  constructor(
    private readonly admin: CaddyAdmin,
    private readonly opts: CachedRoutesOptions,
  ) {
    this.caddy = new CaddyRoutes(admin, opts);
    this.routesPath = `/config/apps/http/servers/${opts.server}/routes`;
    this.cache = new RoutesCache(
      opts.parsedKeptMs ?? PARSED_KEPT_MS,
      (state) => {
        this.positions = RoutePositions.of(state.routes);
      },
      (routes) => caddyEtag(this.routesPath, routes),
    );
  }

  text(): Promise<string> {
    return this.caddy.text();
  }

  /**
   * The routes as Caddy holds them now, as its own bytes passed on while they arrive. While Caddy has loaded
   * no config since the last such read, that read's bytes are sent again (RoutesSnapshot).
   */
  async stream(): Promise<Readable | string> {
    // Caddy's last load is read before its routes, so the routes kept with it are at least that new.
    const load = await lastLoad(this.admin);
    if (load === undefined) return this.caddy.stream();
    return this.snapshot.get(load, () => this.caddy.stream());
  }

  /**
   * One route of the managed server by id, read from Caddy now; undefined when the server has none. A
   * known position is read alone and kept only when it still holds that id; an id Caddy knows nowhere is
   * answered by its id index; otherwise all routes are read.
   */
  async route(id: string): Promise<RouteJson | undefined> {
    for (const at of this.positions.of(id)) {
      const res = await this.admin.read(`${this.routesPath}/${at}`);
      if (res.status !== 200) break;
      const route = JSON.parse(res.text) as RouteJson | null;
      if (route?.["@id"] === id) return route;
    }
    // Only an id that names no path of its own can go to /id/ (Caddy splits the decoded path at "/").
    if (id !== "" && !id.includes("/")) {
      const res = await this.admin.read(`/id/${encodeURIComponent(id)}`);
      if (res.status === 404) return undefined;
    }
    const routes = await this.allRoutes();
    return routes.find((r) => r["@id"] === id);
  }

  /**
   * All routes read and parsed now. Reads asked for while one is under way share it, unless the agent
   * changed the routes since it started: a caller that saw its change answered then reads it.
   */
  private allRoutes(): Promise<RouteJson[]> {
    const shared = this.reading;
    if (shared && shared.generation === this.generation) return shared.routes;
    const reading = {
      generation: this.generation,
      routes: this.caddy.text().then((text) => {
        const routes = JSON.parse(text) as RouteJson[];
        this.positions = RoutePositions.of(routes);
        return routes;
      }),
    };
    this.reading = reading;
    const done = () => {
      if (this.reading === reading) this.reading = undefined;
      collectWhenIdle();
    };
    reading.routes.then(done, done);
    return reading.routes;
  }

  /** The last known routes, else the routes read now; `cached` says which. */
  async current(): Promise<{ state: RoutesState; cached: boolean }> {
    const cached = this.cache.state();
    if (cached) return { state: cached, cached: true };
    return { state: await this.read(), cached: false };
  }

  idsInUse(ids: readonly string[]): Promise<Set<string>> {
    return this.caddy.idsInUse(ids);
  }

  /** Makes the next `current()` read Caddy. */
  forget(): void {
    this.generation++;
    this.cache.drop();
  }

  /**
   * Makes the last known state ready for the next change after a write: the written routes' ETag computed,
   * or, when the agent does not compute it, the routes and their ETag read. Both run between batches, after
   * the answers: at the largest hosts either would lengthen an answer. A read's text is parsed once the
   * event loop is idle, so the next change does not wait for it either (the parsed routes do not show in
   * the idle agent's resident memory); a failed read leaves no state.
   */
  async refresh(): Promise<void> {
    if (this.cache.state() !== undefined) return;
    const res = await this.admin.read(this.routesPath).catch(() => undefined);
    if (res?.status === 200 && res.etag) this.cache.holdText(res.text, res.etag);
  }

  /** Writes the planned routes over `state` as one change (see `CaddyRoutes.write`), and keeps what it wrote. */
  async write(state: RoutesState, p: Plan): Promise<WriteAnswer> {
    const answer = await this.caddy.write(state, p);
    if (answer.kind === "written") this.written(p);
    // Caddy keeps the previous config when it refuses a change, so the last known state still holds.
    if (answer.kind === "written" || answer.kind === "rejected") return answer;
    if (answer.kind === "stale" && state.etagComputed) this.checkEtag = true;
    this.cache.drop();
    return answer;
  }

  /**
   * Takes note of a written plan. The write's own answer verifies it: Caddy answered 2xx to a write carrying
   * If-Match on the routes the plan started from, so it holds the plan's routes. Reading them back would cost
   * a round trip (often two: Caddy restarts its admin endpoint after a change, and a read landing then is
   * reset) and, for a batch, a read and parse of every route, and prove nothing more. The routes' new ETag
   * is computed from them (etag.ts) when they are next needed, and the next write's If-Match catches
   * any difference.
   */
  private written(p: Plan): void {
    this.generation++;
    if (this.computeEtags) this.cache.holdWritten(p.routes);
    else this.cache.drop();
    const only = p.applied.length === 1 ? p.applied[0] : undefined;
    if (only) {
      // One route came, went or changed: move the positions after it rather than index every route again
      // before the answer, which at the largest hosts would lengthen the answer of every single change.
      const { op, at, wasPresent } = only;
      const id = opId(op);
      if (op.kind === "delete") this.positions.removeAt(at);
      else if (wasPresent) this.positions.setAt(at, id);
      else this.positions.insertAt(at, id);
      return;
    }
    // A batch: the routes are indexed once the answers are out; until then a stale hint is caught by its @id.
    const generation = this.generation;
    setImmediate(() => {
      if (this.generation === generation) this.positions = RoutePositions.of(p.routes);
    });
  }

  /** Puts the captured routes back (see `CaddyRoutes.restore`) and keeps them as read back. */
  async restore(before: RoutesState): Promise<RoutesState> {
    this.forget();
    const state = await this.caddy.restore(before);
    this.positions = RoutePositions.of(state.routes);
    if (this.checkEtag) this.checkComputation(state);
    this.cache.set(state);
    return state;
  }

  conform(
    transform: (route: RouteJson) => RouteJson,
    conforms?: (text: string) => boolean,
    lead?: LeadingRoute,
  ): Promise<number> {
    this.cache.drop();
    return this.caddy.conform(transform, conforms, lead);
  }

  /** The routes read now, their positions noted and, after a 412 on a computed ETag, the computation checked. */
  private async read(): Promise<RoutesState> {
    const { state } = await this.caddy.current();
    if (state.serverExists) this.positions = RoutePositions.of(state.routes);
    if (this.checkEtag && state.serverExists) this.checkComputation(state);
    return state;
  }

  /** After a 412 on a computed ETag: stops computing them when Caddy's ETag of the routes read is not the one computed. */
  private checkComputation(state: RoutesState): void {
    this.checkEtag = false;
    if (!state.routesPresent || caddyEtag(this.routesPath, state.routes) === state.etag) return;
    this.computeEtags = false;
    this.opts.log?.warn(
      { path: this.routesPath },
      "Caddy encodes these routes in a way the agent does not reproduce; it reads the routes' ETag after each write from now on",
    );
  }
}
