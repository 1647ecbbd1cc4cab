import type { Readable } from "node:stream";
import type { Logger } from "pino";
import { type CaddyAdmin, CaddyApiError, caddyErrorText } from "../caddy/admin.js";
import { CaddyConfig } from "../caddy/config.js";
import { CaddyConfigFields, type ConfigField } from "../caddy/config-fields.js";
import { caddyEtag } from "../caddy/etag.js";
import { lastLoad, PerLoad } from "../caddy/last-load.js";
import { canonicalJson } from "../util/canonical-json.js";
import { collectWhenIdle } from "../util/idle-gc.js";
import { indexRoutes, type Op, opId, type Plan, type RouteJson, type RoutesIndex } from "./plan.js";
import { RoutePositions } from "./route-positions.js";
import { PARSED_KEPT_MS, RoutesCache, routesStateOf } from "./routes-cache.js";
import { RoutesSnapshot } from "./routes-snapshot.js";
import { readAll, routesBody } from "./routes-stream.js";
import { type RoutesTarget, type WriteOutcome, writePlan } from "./routes-write.js";

export interface RoutesState {
  /** False when the managed server does not exist yet. */
  serverExists: boolean;
  /** Whether the server has a `routes` key (a missing key reads as null). */
  routesPresent: boolean;
  routes: RouteJson[];
  /** `indexRoutes(routes)`, built once with them. */
  index: RoutesIndex;
  /** ETag of the routes path, or of `/config/` when the server is missing. */
  etag: string;
  /** The ETag was computed from routes the agent wrote (caddy/etag.ts), not read from Caddy. */
  etagComputed?: boolean;
  /** The whole config, read only when the server is missing (to find where to create it). */
  config?: Record<string, unknown> | null;
}

export interface CaddyRoutesOptions {
  /** Name of the managed server under `apps.http.servers`. */
  server: string;
  /** Listen addresses of the managed server when it has to be created. */
  listen: readonly string[];
  /**
   * The agent's fields of Caddy's config outside the routes (caddy-fields.ts): brought in line before the
   * managed server is created, and carried by what the creation makes.
   */
  fields?: readonly ConfigField[];
  /** How long routes parsed for the next change are kept (PARSED_KEPT_MS); tests shorten it. */
  parsedKeptMs?: number;
  /** Told when a computed ETag proved not to be Caddy's (the agent then reads the ETag after each write). */
  log?: Pick<Logger, "warn">;
}

/**
 * The managed server's routes in Caddy: reads them (keeping the last known state until it may be stale),
 * writes a planned change as one request carrying If-Match, creates the server on first use, reads a change
 * back and puts captured routes back. It knows Caddy's admin API, not who asked for a change.
 */
export class CaddyRoutes {
  private readonly routesPath: string;
  private readonly target: RoutesTarget;
  private readonly serverPath: string;
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
  /** How many routes Caddy holds, counted once per config it loads. */
  private readonly counted: PerLoad<number>;
  /**
   * Whether a write's new ETag is computed (caddy/etag.ts) rather than read back with all routes. Off for
   * good once Caddy's ETag of routes it read differs from the one computed for them (a config whose text
   * Go writes in a way the agent does not reproduce): each such write would otherwise cost a 412 and a read.
   */
  private computeEtags = true;
  /** A write on a computed ETag met a 412: the next read checks the computation against Caddy's ETag. */
  private checkEtag = false;

  constructor(
    private readonly admin: CaddyAdmin,
    private readonly opts: CaddyRoutesOptions,
  ) {
    this.serverPath = `/config/apps/http/servers/${opts.server}`;
    this.routesPath = `${this.serverPath}/routes`;
    this.target = { ...opts, routesPath: this.routesPath };
    this.cache = new RoutesCache(
      opts.parsedKeptMs ?? PARSED_KEPT_MS,
      (state) => {
        this.positions = RoutePositions.of(state.routes);
      },
      (routes) => caddyEtag(this.routesPath, routes),
    );
    this.counted = new PerLoad(admin);
  }

  /** The routes read from Caddy now, as Caddy's own JSON text (`[]` when there are none). */
  async text(): Promise<string> {
    const res = await this.admin.read(this.routesPath);
    if (res.status === 200) return res.text.trim() === "null" ? "[]" : res.text;
    if (await this.serverMissing(res.status)) return "[]";
    throw new CaddyApiError(res.status, caddyErrorText(res));
  }

  /**
   * How many routes Caddy holds now. Read and counted only once per config Caddy loads: a status asked for
   * by many clients at 20,000 routes does not read and parse 5 MB each time.
   */
  count(): Promise<number> {
    return this.counted.get(async () => (JSON.parse(await this.text()) as unknown[]).length);
  }

  /**
   * The routes as Caddy holds them now, as Caddy's own bytes passed on while they arrive (`[]` when there
   * are none): a list of thousands of routes is neither held whole nor parsed. While Caddy has loaded no
   * config since the last such read, that read's bytes are sent again (RoutesSnapshot).
   */
  async stream(): Promise<Readable | string> {
    // Caddy's last load is read before its routes, so the routes kept with it are at least that new.
    const load = await lastLoad(this.admin);
    if (load === undefined) return this.streamNow();
    return this.snapshot.get(load, () => this.streamNow());
  }

  /** The routes read from Caddy now, passed on as they arrive. */
  private async streamNow(): Promise<Readable | string> {
    const res = await this.admin.stream(this.routesPath);
    if (res.status === 200) return routesBody(res.body, Number(res.headers["content-length"] ?? Number.NaN));
    const text = await readAll(res.body);
    if (await this.serverMissing(res.status)) return "[]";
    throw new CaddyApiError(res.status, caddyErrorText({ ...res, text }));
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
      routes: this.text().then((text) => {
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

  /** Makes the next `current()` read Caddy. */
  forget(): void {
    this.generation++;
    this.cache.drop();
  }

  /**
   * Makes the last known state ready for the next change after a write: the written routes' ETag computed
   * (tens of milliseconds at 20,000 routes), or, when the agent does not compute it, the routes and their
   * ETag read. A read's text is parsed once the event loop is idle, so the next change does not wait for it
   * (at 20,000 routes the parse takes tens of milliseconds; the parsed routes do not show in the idle
   * agent's resident memory); a failed read leaves no state.
   */
  async refresh(): Promise<void> {
    if (this.cache.state() !== undefined) return;
    const res = await this.admin.read(this.routesPath).catch(() => undefined);
    if (res?.status === 200 && res.etag) this.cache.holdText(res.text, res.etag);
  }

  /** Ids the creates among `ops` would take that are in use elsewhere in Caddy's config (ids are global there). */
  async idsElsewhere(ops: readonly Op[], state: RoutesState): Promise<Set<string>> {
    const ask = [...new Set(ops.filter((op) => op.kind === "create").map(opId))].filter(
      (id) => !state.index.first.has(id),
    );
    const found = await Promise.all(
      ask.map(async (id) => {
        const res = await this.admin.read(`/id/${encodeURIComponent(id)}`);
        if (res.status === 200) return id;
        if (res.status === 404) return undefined;
        throw new CaddyApiError(res.status, caddyErrorText(res));
      }),
    );
    return new Set(found.filter((x): x is string => x !== undefined));
  }

  /** Writes the planned routes over `state` as one change, with If-Match on the ETag `state` was read with. */
  async write(state: RoutesState, p: Plan): Promise<WriteOutcome> {
    const outcome = await writePlan(this.admin, this.target, state, p);
    // Caddy keeps the previous config when it refuses a change, so the last known state still holds.
    if (outcome.kind === "written" || outcome.kind === "refused") return outcome;
    if (outcome.kind === "stale" && state.etagComputed) this.checkEtag = true;
    this.cache.drop();
    return outcome;
  }

  /**
   * Takes note of a written plan. The write's own answer verifies it: Caddy answered 2xx to a write carrying
   * If-Match on the routes the plan started from, so it holds the plan's routes. Reading them back would cost
   * a round trip (often two: Caddy restarts its admin endpoint after a change, and a read landing then is
   * reset) and, for a batch, a read and parse of every route, and prove nothing more. The routes' new ETag
   * is computed from them (caddy/etag.ts) when they are next needed, and the next write's If-Match catches
   * any difference.
   */
  written(p: Plan): void {
    this.generation++;
    if (this.computeEtags) this.cache.holdWritten(p.routes);
    else this.cache.drop();
    const only = p.applied.length === 1 ? p.applied[0] : undefined;
    if (only) {
      // One route came, went or changed: move the positions after it rather than index every route again
      // before the answer (10 ms at 20,000 routes).
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

  /** Puts the captured routes back as they were before a change; throws unless they read back that way. */
  async restore(before: RoutesState): Promise<void> {
    this.generation++;
    this.cache.drop();
    if (!before.serverExists) {
      const now = await this.admin.read(this.serverPath);
      if (now.status === 200 && now.text.trim() !== "null") await this.admin.write("DELETE", this.serverPath);
    } else if (!before.routesPresent) {
      const now = await this.admin.read(this.routesPath);
      if (now.status === 200 && now.text.trim() !== "null") await this.admin.write("DELETE", this.routesPath);
    } else {
      await this.admin.write("PATCH", this.routesPath, before.routes);
    }
    const check = await this.read();
    if (canonicalJson(check.routes) !== canonicalJson(before.routes))
      throw new Error("the routes read back differ from the captured state");
    this.cache.set(check);
  }

  /**
   * Rewrites every route `transform` changes, as one change of CaddyConfig (one write with If-Match, one
   * reload; none when no route changes); returns how many changed. `conforms` may tell from Caddy's text
   * alone that nothing would change, which spares parsing every route at start. A lost race reads the
   * routes again (CaddyConfig's rule).
   */
  async conform(
    transform: (route: RouteJson) => RouteJson,
    conforms: (text: string) => boolean = () => false,
  ): Promise<number> {
    this.cache.drop();
    let changed = 0;
    const rewrite = (current: unknown) => {
      changed = 0;
      const routes = ((current ?? []) as RouteJson[]).map((r) => {
        const out = transform(r);
        if (out !== r) changed++;
        return out;
      });
      return changed === 0 ? current : routes;
    };
    // The routes are what the managed server holds: a missing server has none to rewrite.
    const keys = ["apps", "http", "servers", this.opts.server, "routes"];
    // A rewrite that changed no route gives back the array it was given: nothing else to compare.
    const done = await new CaddyConfig(this.admin).update(keys, rewrite, {
      needs: 3,
      inLine: conforms,
      same: () => false,
    });
    return done.written ? changed : 0;
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

  /** Whether a read of the routes answered `status` because the managed server is missing (CaddyConfig's rule). */
  private serverMissing(status: number): Promise<boolean> {
    return new CaddyConfig(this.admin).isMissing(["apps", "http", "servers", this.opts.server], status);
  }

  private async read(): Promise<RoutesState> {
    const res = await this.admin.read(this.routesPath);
    if (res.status === 200 && res.etag) {
      const state = routesStateOf(res.text, res.etag);
      this.positions = RoutePositions.of(state.routes);
      if (this.checkEtag) this.checkComputation(state);
      return state;
    }
    if (await this.serverMissing(res.status)) {
      // Before the server can serve a host: the local CA's trust and the issuer must be in place first.
      if (this.opts.fields) await new CaddyConfigFields(this.admin).conform(this.opts.fields);
      const whole = await this.admin.read("/config/");
      if (whole.status !== 200 || !whole.etag) throw new CaddyApiError(whole.status, caddyErrorText(whole));
      const config = JSON.parse(whole.text) as Record<string, unknown> | null;
      return {
        serverExists: false,
        routesPresent: false,
        routes: [],
        index: indexRoutes([]),
        etag: whole.etag,
        config,
      };
    }
    throw new CaddyApiError(res.status, caddyErrorText(res));
  }
}
