import type { Logger } from "pino";
import { type CaddyAdmin, CaddyApiError, CaddyUnavailableError, caddyErrorText } from "./caddy-admin.js";
import { canonicalJson, type Op, opId, type Plan, plan, type RouteJson } from "./plan.js";

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

export type ChangeResult =
  | { ok: true; previous: RouteJson | null; route: RouteJson | null }
  | { ok: false; previous: RouteJson | null; failure: WriteFailure };

interface RoutesState {
  /** False when the managed server does not exist yet. */
  serverExists: boolean;
  /** Whether the server has a `routes` key (a missing key reads as null). */
  routesPresent: boolean;
  routes: RouteJson[];
  /** ETag of the routes path, or of `/config/` when the server is missing. */
  etag: string;
  /** The whole config, read only when the server is missing (to find where to create it). */
  config?: Record<string, unknown> | null;
}

interface Pending {
  req: ChangeRequest;
  resolve: (r: ChangeResult) => void;
  /** Canonical JSON of the previous state `prepare` last saw. */
  preparedWith?: string;
  previous: RouteJson | null;
}

export interface WriterOptions {
  server: string;
  listen: readonly string[];
  log: Logger;
  /** Upper bound of changes sent to Caddy as one config change. */
  maxBatch?: number;
}

const errno = (err: unknown): string | undefined =>
  ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code;
/** Up to this many changed ids are verified one by one; more, by one read of all routes. */
const FEW = 8;
/** Connection errors that prove the request never reached Caddy. */
const NOT_SENT = new Set(["ECONNREFUSED", "ENOENT", "EACCES"]);

/**
 * The one writer of the managed server's routes. Changes queue up while a write is under way and the
 * next write takes all of them as one Caddy config change (Caddy reloads its whole config per change, so a
 * batch costs what one change costs); a change that arrives while the writer is idle goes at once. Every
 * write carries If-Match, is read back and verified, and is undone when it fails after Caddy may have changed.
 */
export class RouteWriter {
  private readonly queue: Pending[] = [];
  private busy = false;
  /** A change was verified by id only: the routes' new ETag still has to be read. */
  private refreshDue = false;
  private idleWaiters: (() => void)[] = [];
  /**
   * The routes as of the last read or verified write; dropped whenever it may be stale. After a refresh it
   * holds the text Caddy sent, parsed when the next batch needs it.
   */
  private cache: RoutesState | { text: string; etag: string } | undefined;
  readonly routesPath: string;
  private readonly serverPath: string;
  private readonly maxBatch: number;

  constructor(
    readonly admin: CaddyAdmin,
    private readonly opts: WriterOptions,
  ) {
    this.serverPath = `/config/apps/http/servers/${opts.server}`;
    this.routesPath = `${this.serverPath}/routes`;
    this.maxBatch = opts.maxBatch ?? 500;
  }

  submit(req: ChangeRequest): Promise<ChangeResult> {
    return new Promise((resolve) => {
      this.queue.push({ req, resolve, previous: null });
      void this.drain();
    });
  }

  /** Resolves once no change is queued or under way and the post-answer read is done. */
  whenIdle(): Promise<void> {
    if (!this.busy && this.queue.length === 0 && !this.refreshDue) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** The managed server's routes, read from Caddy now, as Caddy's own JSON text (`[]` when there are none). */
  async routesText(): Promise<string> {
    const res = await this.admin.read(this.routesPath);
    if (res.status === 200) return res.text.trim() === "null" ? "[]" : res.text;
    if (await this.serverMissing(res.status)) return "[]";
    throw new CaddyApiError(res.status, caddyErrorText(res));
  }

  private async drain(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      while (this.queue.length > 0 || this.refreshDue) {
        if (this.queue.length === 0) {
          await this.refresh();
          continue;
        }
        const batch = this.queue.splice(0, this.maxBatch);
        try {
          await this.apply(batch, true);
        } catch (err) {
          this.opts.log.error({ err }, "route writer failed unexpectedly");
          this.cache = undefined;
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
      if (this.queue.length === 0) for (const resolve of this.idleWaiters.splice(0)) resolve();
    }
  }

  /**
   * Reads the routes and their ETag after a change was verified and answered, so the next change starts
   * from a known state without the answer waiting for a read of every route.
   */
  private async refresh(): Promise<void> {
    this.refreshDue = false;
    try {
      const res = await this.admin.read(this.routesPath);
      if (res.status !== 200 || !res.etag) {
        this.cache = undefined;
        return;
      }
      const cached = { text: res.text, etag: res.etag };
      this.cache = cached;
      // Parsed while idle, so the next change does not wait for it.
      setImmediate(() => {
        if (this.cache === cached) this.cachedState();
      });
    } catch {
      this.cache = undefined;
    }
  }

  /** Missing intermediate keys read as 400 ("invalid traversal path"); confirm the server is really absent. */
  private async serverMissing(status: number): Promise<boolean> {
    if (status !== 400 && status !== 404) return false;
    const res = await this.admin.read(this.serverPath);
    return res.status === 400 || res.status === 404 || (res.status === 200 && res.text.trim() === "null");
  }

  private async readState(): Promise<RoutesState> {
    const res = await this.admin.read(this.routesPath);
    if (res.status === 200 && res.etag) return routesStateOf(res.text, res.etag);
    if (await this.serverMissing(res.status)) {
      const whole = await this.admin.read("/config/");
      if (whole.status !== 200 || !whole.etag) throw new CaddyApiError(whole.status, caddyErrorText(whole));
      const config = JSON.parse(whole.text) as Record<string, unknown> | null;
      return { serverExists: false, routesPresent: false, routes: [], etag: whole.etag, config };
    }
    throw new CaddyApiError(res.status, caddyErrorText(res));
  }

  /** Ids that creates would take but that are in use elsewhere in Caddy's config (ids are global there). */
  private async idsElsewhere(batch: readonly Pending[], state: RoutesState): Promise<Set<string>> {
    const inRoutes = new Set(state.routes.map((r) => r["@id"]));
    const ask = [
      ...new Set(batch.filter((p) => p.req.op.kind === "create").map((p) => opId(p.req.op))),
    ].filter((id) => !inRoutes.has(id));
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

  /** Plans the batch and runs `prepare` for every change that will apply, until no prepare fails. */
  private async planAndPrepare(
    batch: Pending[],
    state: RoutesState,
    elsewhere: Set<string>,
  ): Promise<{ live: Pending[]; p: Plan }> {
    let live = batch;
    for (;;) {
      const p = plan(
        state.routes,
        live.map((x) => x.req.op),
        elsewhere,
      );
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
    }
  }

  private async apply(batch: Pending[], mayRetry: boolean): Promise<void> {
    let state: RoutesState;
    let elsewhere: Set<string>;
    const fromCache = this.cache !== undefined;
    try {
      state = this.cachedState() ?? (await this.readState());
      elsewhere = await this.idsElsewhere(batch, state);
    } catch (err) {
      this.cache = undefined;
      return this.failAll(batch, failureOf(err));
    }
    // A 404 or 409 never reaches Caddy, so no If-Match would catch a stale cache: confirm it on a fresh read.
    if (
      fromCache &&
      plan(
        state.routes,
        batch.map((x) => x.req.op),
        elsewhere,
      ).outcomes.some((o) => !o.ok)
    ) {
      this.cache = undefined;
      return this.apply(batch, mayRetry);
    }
    const { live, p } = await this.planAndPrepare(batch, state, elsewhere);
    const settle = () =>
      live.forEach((pending, i) => {
        const o = p.outcomes[i];
        if (!o) return;
        if (o.ok) pending.resolve({ ok: true, previous: o.previous, route: o.route });
        else pending.resolve({ ok: false, previous: null, failure: { kind: o.reason } });
      });
    if (p.applied.length === 0) return settle();

    try {
      await this.write(state, p);
    } catch (err) {
      if (err instanceof CaddyApiError && err.status === 412) {
        this.cache = undefined;
        if (mayRetry) return this.apply(live, false);
        return this.failApplied(live, p, {
          kind: "unavailable",
          message: "Caddy's config kept changing under the agent (If-Match failed twice)",
        });
      }
      if (err instanceof CaddyApiError) {
        // Caddy keeps the previous config when it refuses a change, so the cache still holds.
        if (p.applied.length > 1) return this.split(live, p);
        return this.failApplied(live, p, { kind: "rejected", message: err.message });
      }
      this.cache = undefined;
      if (NOT_SENT.has(errno(err) ?? "")) return this.failApplied(live, p, failureOf(err));
      // The write may or may not have landed: put the captured state back.
      return this.failApplied(
        live,
        p,
        await this.restore(state, `the change did not complete: ${(err as Error).message}`),
      );
    }

    const problem = await this.verify(p).catch(
      (err: Error) => `reading the change back failed: ${err.message}`,
    );
    if (problem !== undefined) {
      this.cache = undefined;
      return this.failApplied(live, p, await this.restore(state, problem));
    }
    settle();
  }

  /** Applies the first and second half of a refused batch on their own, so only the culprits fail. */
  private async split(live: Pending[], p: Plan): Promise<void> {
    const appliedIdx = new Set(p.applied.map((a) => a.index));
    // Changes that did not apply (404/409) are re-planned with their neighbours; cut between applied ones.
    const positions = live.map((_, i) => i).filter((i) => appliedIdx.has(i));
    const cut = positions[Math.floor(positions.length / 2)] ?? Math.ceil(live.length / 2);
    await this.apply(live.slice(0, cut), true);
    await this.apply(live.slice(cut), true);
  }

  private failAll(batch: Pending[], failure: WriteFailure): void {
    for (const pending of batch) pending.resolve({ ok: false, previous: pending.previous, failure });
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

  private async write(state: RoutesState, p: Plan): Promise<void> {
    const ifMatch = state.etag;
    if (!state.serverExists) return this.createServer(state, p.routes, ifMatch);
    if (!state.routesPresent) return this.admin.write("PUT", this.routesPath, p.routes, ifMatch);
    const only = p.applied.length === 1 ? p.applied[0] : undefined;
    if (!only) return this.admin.write("PATCH", this.routesPath, p.routes, ifMatch);
    const { op, at, wasPresent } = only;
    if (op.kind === "delete")
      return this.admin.write("DELETE", `${this.routesPath}/${at}`, undefined, ifMatch);
    if (wasPresent) return this.admin.write("PATCH", `${this.routesPath}/${at}`, op.route, ifMatch);
    if (at === state.routes.length) return this.admin.write("POST", this.routesPath, op.route, ifMatch);
    return this.admin.write("PUT", `${this.routesPath}/${at}`, op.route, ifMatch);
  }

  /** Creates the managed server (and any missing parents) holding `routes`, listening on the configured addresses. */
  private async createServer(state: RoutesState, routes: RouteJson[], ifMatch: string): Promise<void> {
    const chain = ["apps", "http", "servers", this.opts.server];
    let value: unknown = { listen: [...this.opts.listen], routes };
    let node: unknown = state.config;
    let depth = 0;
    while (
      depth < chain.length &&
      node &&
      typeof node === "object" &&
      (chain[depth] as string) in (node as object)
    ) {
      node = (node as Record<string, unknown>)[chain[depth] as string];
      depth++;
    }
    for (let i = chain.length - 1; i > depth; i--) value = { [chain[i] as string]: value };
    if (state.config === null || state.config === undefined) {
      return this.admin.write("POST", "/config/", { [chain[0] as string]: value }, ifMatch);
    }
    const parent = chain.slice(0, depth).join("/");
    return this.admin.write("POST", `/config/${parent ? `${parent}/` : ""}${chain[depth]}`, value, ifMatch);
  }

  /** Checks each applied change is in Caddy as written, before it is answered. */
  private async verify(p: Plan): Promise<string | undefined> {
    // Only the last change to an id decides what Caddy must hold for it (a batch may create and delete one id).
    const last = new Map(p.applied.map(({ op }) => [opId(op), op]));
    if (last.size <= FEW) {
      // A few changes: read just those routes by id, whatever the number of routes; the routes' new
      // ETag is read once the answers are out (refresh), before the writer touches Caddy again.
      this.cache = undefined;
      this.refreshDue = true;
      const problems = await Promise.all(
        [...last].map(async ([id, op]) => {
          const res = await this.admin.read(`/id/${encodeURIComponent(id)}`);
          if (op.kind === "delete")
            return res.status === 404 ? undefined : `route ${id} is still present after its deletion`;
          if (res.status !== 200) return `route ${id} cannot be read back: ${caddyErrorText(res)}`;
          return canonicalJson(JSON.parse(res.text)) === canonicalJson(op.route)
            ? undefined
            : `route ${id} does not read back as written`;
        }),
      );
      return problems.find((x) => x !== undefined);
    }
    const res = await this.admin.read(this.routesPath);
    if (res.status !== 200 || !res.etag) return `reading the routes back failed: ${caddyErrorText(res)}`;
    const state = routesStateOf(res.text, res.etag);
    const byId = new Map(state.routes.map((r) => [r["@id"], r]));
    for (const [id, op] of last) {
      const got = byId.get(id);
      if (op.kind === "delete") {
        if (got) return `route ${id} is still present after its deletion`;
      } else if (!got || canonicalJson(got) !== canonicalJson(op.route)) {
        return `route ${id} does not read back as written`;
      }
    }
    this.cache = state;
    return undefined;
  }

  /** The cached routes, parsing a cached read-back text first. */
  private cachedState(): RoutesState | undefined {
    const c = this.cache;
    if (c === undefined || "routes" in c) return c;
    this.cache = routesStateOf(c.text, c.etag);
    return this.cache;
  }

  /** Puts the captured routes back as they were before the change. */
  private async restore(before: RoutesState, why: string): Promise<WriteFailure> {
    this.opts.log.warn({ why }, "route change failed; restoring the captured state");
    try {
      if (!before.serverExists) {
        const now = await this.admin.read(this.serverPath);
        if (now.status === 200 && now.text.trim() !== "null")
          await this.admin.write("DELETE", this.serverPath);
      } else if (!before.routesPresent) {
        const now = await this.admin.read(this.routesPath);
        if (now.status === 200 && now.text.trim() !== "null")
          await this.admin.write("DELETE", this.routesPath);
      } else {
        await this.admin.write("PATCH", this.routesPath, before.routes);
      }
      const check = await this.readState();
      if (canonicalJson(check.routes) !== canonicalJson(before.routes))
        throw new Error("the routes read back differ from the captured state");
      this.cache = check;
      return { kind: "rolled_back", message: `${why}; the previous routes were restored` };
    } catch (err) {
      this.cache = undefined;
      this.opts.log.error({ err, why }, "restoring the captured routes failed");
      return {
        kind: "rollback_failed",
        message: `${why}; restoring the previous routes failed too: ${(err as Error).message}`,
      };
    }
  }
}

/** The state of an existing server from Caddy's answer for its routes path (`null` when it has no routes key). */
function routesStateOf(text: string, etag: string): RoutesState {
  const parsed = JSON.parse(text) as RouteJson[] | null;
  return { serverExists: true, routesPresent: parsed !== null, routes: parsed ?? [], etag };
}

function failureOf(err: unknown): WriteFailure {
  if (err instanceof CaddyUnavailableError) return { kind: "unavailable", message: err.message };
  if (err instanceof CaddyApiError)
    return { kind: "unavailable", message: `Caddy answered ${err.status}: ${err.message}` };
  return { kind: "unavailable", message: (err as Error).message };
}
