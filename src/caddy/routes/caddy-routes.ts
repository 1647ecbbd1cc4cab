import type { Readable } from "node:stream";
import { sameJson } from "../../util/canonical-json.js";
import { type CaddyAdmin, CaddyApiError, caddyErrorText, JsonPieces } from "../admin.js";
import { CaddyConfig } from "../config.js";
import { CaddyConfigFields, type ConfigField } from "../config-fields.js";
import { managedServerCreation } from "../server-creation.js";
import { goJsonPieces } from "./etag.js";
import { type LeadingRoute, withLead } from "./leading-route.js";
import { type ChangeOutcome, indexRoutes, type Plan, type RouteJson, type RoutesIndex } from "./plan.js";
import { readAll, routesBody } from "./routes-stream.js";

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
  /** The ETag was computed from routes the agent wrote (etag.ts), not read from Caddy. */
  etagComputed?: boolean;
  /** The whole config, read only when the server is missing (to find where to create it). */
  config?: Record<string, unknown> | null;
}

/**
 * How Caddy answered a write: it holds the plan (`written`); the change ended, and how (Caddy refused the
 * config: `rejected`; the request never reached it: `unavailable`); or what the writer still has to act on:
 * If-Match failed and nothing was written (`stale`), or the connection failed after the request may have
 * reached Caddy, and the write may or may not have landed (`uncertain`).
 */
export type WriteAnswer =
  | { kind: "written" | "stale" }
  | { kind: "uncertain"; message: string }
  | Extract<ChangeOutcome, { kind: "rejected" | "unavailable" }>;

/**
 * The managed server's routes in Caddy, as the writer and the routes' reads reach them. Two stores answer
 * alike: `CaddyRoutes` (here) reads Caddy for every change and every read; `CachedRoutes`
 * (cached-routes.ts) keeps what it learnt between them, for thousands of routes.
 */
export interface RoutesStore {
  /** The routes to plan on, with the ETag a write's If-Match names; `cached` when not read from Caddy now. */
  current(): Promise<{ state: RoutesState; cached: boolean }>;
  /** Those of `ids` that Caddy's config holds anywhere (ids are global there). */
  idsInUse(ids: readonly string[]): Promise<Set<string>>;
  /** Writes plan `p` over `state` as one request with If-Match on `state`'s ETag. */
  write(state: RoutesState, p: Plan): Promise<WriteAnswer>;
  /** Puts the routes of `before` back and reads them back; throws unless they read back that way. */
  restore(before: RoutesState): Promise<RoutesState>;
  /** Whatever is known may be stale (a failure, or another writer): the next `current` reads Caddy. */
  forget(): void;
  /** Readies the next change's state after a write, between batches. */
  refresh(): Promise<void>;
  /** Rewrites every route `transform` changes, and the lead, as one change (see `CaddyRoutes.conform`). */
  conform(
    transform: (route: RouteJson) => RouteJson,
    conforms?: (text: string) => boolean,
    lead?: LeadingRoute,
  ): Promise<number>;
  /** The routes read from Caddy now, as Caddy's own JSON text (`[]` when there are none). */
  text(): Promise<string>;
  /** The same, as Caddy's bytes passed on while they arrive. */
  stream(): Promise<Readable | string>;
  /** One route of the managed server by id; undefined when it has none. */
  route(id: string): Promise<RouteJson | undefined>;
}

export interface CaddyRoutesOptions {
  /** Name of the managed server under `apps.http.servers`. */
  server: string;
  /** Listen addresses of the managed server when it has to be created. */
  listen: readonly string[];
  /**
   * The agent's fields of Caddy's config outside the routes (caddy/agent-fields.ts): brought in line before
   * the managed server is created, and carried by what the creation makes.
   */
  fields?: readonly ConfigField[];
}

/** Connection errors that prove the request never reached Caddy. */
const NOT_SENT = new Set(["ECONNREFUSED", "ENOENT", "EACCES"]);

/**
 * The managed server's routes in Caddy, read for every change and every read: read with their ETag, a plan
 * written as one request carrying If-Match, the server created on first use, captured routes put back. It
 * knows Caddy's admin API, not who asked for a change, and keeps nothing between its calls.
 */
export class CaddyRoutes implements RoutesStore {
  private readonly routesPath: string;
  private readonly serverPath: string;

  constructor(
    private readonly admin: CaddyAdmin,
    private readonly opts: CaddyRoutesOptions,
  ) {
    this.serverPath = `/config/apps/http/servers/${opts.server}`;
    this.routesPath = `${this.serverPath}/routes`;
  }

  /** The routes read from Caddy now, as Caddy's own JSON text (`[]` when there are none). */
  async text(): Promise<string> {
    const res = await this.admin.read(this.routesPath);
    if (res.status === 200) return res.text.trim() === "null" ? "[]" : res.text;
    if (await this.serverMissing(res.status)) return "[]";
    throw new CaddyApiError(res.status, caddyErrorText(res));
  }

  /** The routes read from Caddy now, passed on as they arrive: a list of thousands is neither held whole nor parsed. */
  async stream(): Promise<Readable | string> {
    const res = await this.admin.stream(this.routesPath);
    if (res.status === 200) return routesBody(res.body, Number(res.headers["content-length"] ?? Number.NaN));
    const text = await readAll(res.body);
    if (await this.serverMissing(res.status)) return "[]";
    throw new CaddyApiError(res.status, caddyErrorText({ ...res, text }));
  }

  /** One route of the managed server by id, from all routes read now; undefined when it has none. */
  async route(id: string): Promise<RouteJson | undefined> {
    const routes = JSON.parse(await this.text()) as RouteJson[];
    return routes.find((r) => r["@id"] === id);
  }

  /** The routes read now. */
  async current(): Promise<{ state: RoutesState; cached: boolean }> {
    return { state: await this.read(), cached: false };
  }

  /** Nothing is kept, so there is nothing to forget. */
  forget(): void {}

  /** Nothing is kept: the next change reads the routes. */
  async refresh(): Promise<void> {}

  /** Those of `ids` that Caddy's config holds anywhere, each looked up in Caddy's id index. */
  async idsInUse(ids: readonly string[]): Promise<Set<string>> {
    const found = await Promise.all(
      ids.map(async (id) => {
        const res = await this.admin.read(`/id/${encodeURIComponent(id)}`);
        if (res.status === 200) return id;
        if (res.status === 404) return undefined;
        throw new CaddyApiError(res.status, caddyErrorText(res));
      }),
    );
    return new Set(found.filter((x): x is string => x !== undefined));
  }

  /**
   * Writes plan `p` over `state` as one request carrying If-Match on the ETag `state` has, and says how it
   * ended. A write whose answer was lost is looked up: when the routes now read as the plan's routes, it
   * landed (CaddyAdmin.write has already sent it again when it provably had not).
   */
  async write(state: RoutesState, p: Plan): Promise<WriteAnswer> {
    const req = this.requestFor(state, p);
    try {
      await this.admin.write(req.method, req.path, req.body, state.etag);
      return { kind: "written" };
    } catch (err) {
      if (err instanceof CaddyApiError)
        return err.status === 412 ? { kind: "stale" } : { kind: "rejected", message: err.message };
      const message = (err as Error).message;
      const code = ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code;
      if (NOT_SENT.has(code ?? "")) return { kind: "unavailable", message };
      return (await this.holds(p.routes)) ? { kind: "written" } : { kind: "uncertain", message };
    }
  }

  /** Whether Caddy's routes are now `routes`, as far as a read can tell. */
  private async holds(routes: RouteJson[]): Promise<boolean> {
    const now = await this.admin.read(this.routesPath).catch(() => undefined);
    if (now?.status !== 200) return false;
    return sameJson(JSON.parse(now.text), routes);
  }

  /** The one request that writes plan `p`: a targeted write for a single change, the whole routes array for a batch. */
  private requestFor(state: RoutesState, p: Plan): WriteRequest {
    const path = this.routesPath;
    if (!state.serverExists) {
      const { path: at, value } = managedServerCreation(state.config, this.opts, p.routes);
      return { method: "POST", path: at, body: value };
    }
    if (!state.routesPresent) return { method: "PUT", path, body: p.routes };
    const only = p.applied.length === 1 ? p.applied[0] : undefined;
    if (!only) {
      // A batch that only adds routes at the end (creates of new hosts) sends just those: Caddy then parses
      // a few routes instead of all of them, a large part of such a write at the largest hosts.
      const added = appendedTo(state.routes, p.routes);
      if (added) return { method: "POST", path: `${path}/...`, body: added };
      // Any other batch sends all routes, as Go's text of them (Caddy decodes it to the same value) made
      // of each route's text kept for their ETag (etag.ts): only the routes the batch brought are
      // encoded, and the text is written piece by piece, never held whole.
      const routes = p.routes;
      return { method: "PATCH", path, body: new JsonPieces(() => goJsonPieces(routes)) };
    }
    const { op, at, wasPresent } = only;
    if (op.kind === "delete") return { method: "DELETE", path: `${path}/${at}` };
    if (wasPresent) return { method: "PATCH", path: `${path}/${at}`, body: op.route };
    if (at === state.routes.length) return { method: "POST", path, body: op.route };
    return { method: "PUT", path: `${path}/${at}`, body: op.route };
  }

  /** Puts the captured routes back as they were before a change; throws unless they read back that way. */
  async restore(before: RoutesState): Promise<RoutesState> {
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
    if (!sameJson(check.routes, before.routes))
      throw new Error("the routes read back differ from the captured state");
    return check;
  }

  /**
   * Rewrites every route `transform` changes, and puts `lead` first (leading-route.ts `withLead`), as one
   * change of CaddyConfig (one write with If-Match, one reload; none when no route changes); returns how
   * many changed (the lead counts as one). `conforms` may tell from Caddy's text alone that nothing would
   * change, which spares parsing every route at start. A lost race reads the routes again (CaddyConfig's rule).
   */
  async conform(
    transform: (route: RouteJson) => RouteJson,
    conforms: (text: string) => boolean = () => false,
    lead?: LeadingRoute,
  ): Promise<number> {
    let changed = 0;
    const rewrite = (current: unknown) => {
      changed = 0;
      const routes = ((current ?? []) as RouteJson[]).map((r) => {
        const out = transform(r);
        if (out !== r) changed++;
        return out;
      });
      const led = lead ? withLead(routes, lead) : routes;
      if (led !== routes) changed++;
      return changed === 0 ? current : led;
    };
    // The routes are what the managed server holds: a missing server has none to rewrite, and gets the lead
    // with its first route (a server made here would have no listen address).
    const keys = ["apps", "http", "servers", this.opts.server, "routes"];
    // A rewrite that changed no route gives back the array it was given: nothing else to compare.
    const done = await new CaddyConfig(this.admin).update(keys, rewrite, {
      needs: 4,
      inLine: conforms,
      same: () => false,
    });
    return done.written ? changed : 0;
  }

  /** Whether a read of the routes answered `status` because the managed server is missing (CaddyConfig's rule). */
  private serverMissing(status: number): Promise<boolean> {
    return new CaddyConfig(this.admin).isMissing(["apps", "http", "servers", this.opts.server], status);
  }

  private async read(): Promise<RoutesState> {
    const res = await this.admin.read(this.routesPath);
    if (res.status === 200 && res.etag) return routesStateOf(res.text, res.etag);
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

interface WriteRequest {
  method: "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  body?: unknown;
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

/** The state of an existing server from Caddy's answer for its routes path (`null` when it has no routes key). */
export function routesStateOf(text: string, etag: string): RoutesState {
  const parsed = JSON.parse(text) as RouteJson[] | null;
  return { ...routesStateFrom(parsed ?? [], etag), routesPresent: parsed !== null };
}

/** The state of an existing server holding `routes` with ETag `etag`. */
export function routesStateFrom(routes: RouteJson[], etag: string): RoutesState {
  return { serverExists: true, routesPresent: true, routes, index: indexRoutes(routes), etag };
}
