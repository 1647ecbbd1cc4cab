/** A route as Caddy holds it; only the parts the agent reasons about are typed. */
export type RouteJson = {
  "@id"?: string;
  match?: { host?: string[]; [k: string]: unknown }[];
  handle?: Record<string, unknown>[];
  terminal?: boolean;
  [k: string]: unknown;
};

export type Op =
  | { kind: "create"; route: RouteJson & { "@id": string } }
  | { kind: "replace"; id: string; route: RouteJson & { "@id": string } }
  | { kind: "delete"; id: string }
  /** Create or replace, for routes the agent owns (the operator's). */
  | { kind: "put"; route: RouteJson & { "@id": string } };

/**
 * How a change ended: the one name each ending goes by, from the plan's verdict or Caddy's answer to the
 * change's record (proxy/journal.ts), its log line and the error the API answers with (proxy/errors.ts
 * `changeError`).
 */
export type ChangeOutcome =
  /** Caddy holds the change; `route` is the route it wrote (null for a removal). */
  | { kind: "applied"; route: RouteJson | null }
  | Refusal
  /** Caddy could not be reached or answered with an error; nothing was changed. */
  | { kind: "unavailable"; message: string }
  /** Caddy refused the new config and kept the old one. */
  | { kind: "rejected"; message: string }
  /** The change failed after Caddy may have changed, and the captured state was put back. */
  | { kind: "rolled_back"; message: string }
  /** The change failed and putting the captured state back failed too. */
  | { kind: "rollback_failed"; message: string }
  /** Recording the state it replaces failed, so the change was dropped before Caddy was touched. */
  | { kind: "capture_failed"; message: string };

/** A 404/409 the plan finds: the id is taken or missing, or another route serves one of the route's exact hosts. */
export type Refusal =
  | { kind: "exists" | "not_found" }
  /** `owner`: the @id of the route serving `host`, null for a route without one. */
  | { kind: "host_taken"; host: string; owner: string | null };

/** Whether an outcome is a 404/409 found before Caddy was touched. */
export const isRefusal = (o: ChangeOutcome): o is Refusal =>
  o.kind === "exists" || o.kind === "not_found" || o.kind === "host_taken";

/** How a change ended, and the route it replaced (null when there was none, or it did not apply). */
export interface ChangeEnd {
  outcome: ChangeOutcome;
  previous: RouteJson | null;
}

/**
 * The start of the `@id` of a route the agent keeps in place itself (leading-route.ts), which no route id
 * can take (a domain holds no colon): a plan never counts it as a route that may shadow another, so it
 * never places a route before it.
 */
export const AGENT_ROUTE_ID_PREFIX = "hostkeeper:";

export const opId = (op: Op): string => (op.kind === "create" || op.kind === "put" ? op.route["@id"] : op.id);

function hostMatches(pattern: string, host: string): boolean {
  // Runs over every route for every create: compare whole strings unless the pattern has a wildcard.
  if (!pattern.includes("*"))
    return pattern.length === host.length && pattern.toLowerCase() === host.toLowerCase();
  const p = pattern.toLowerCase().split(".");
  const h = host.toLowerCase().split(".");
  if (p.length !== h.length) return false;
  return p.every((label, i) => label === "*" || label === h[i]);
}

/** Whether an existing route would take requests for `host` before a route placed after it could. */
export function routeShadows(route: RouteJson, host: string): boolean {
  if (!Array.isArray(route.match) || route.match.length === 0) return true;
  return route.match.some((set) => {
    if (!Array.isArray(set.host)) return true;
    return set.host.some((h) => hostMatches(h, host));
  });
}

const hostsOf = (route: RouteJson): string[] => route.match?.flatMap((m) => m.host ?? []) ?? [];

/** The hosts of a route's matchers that are not wildcards, lowercase. */
const exactHosts = (route: RouteJson): string[] =>
  hostsOf(route)
    .filter((h) => !h.includes("*"))
    .map((h) => h.toLowerCase());

/**
 * What a plan looks up in a routes array, built in one pass when the array is read from Caddy rather than
 * in every plan: finding ids and the routes that may shadow a new one by scanning every route made each
 * plan as slow as the routes are many, and a change may be planned twice.
 */
export interface RoutesIndex {
  /** Position of the first route holding each id (Caddy before 2.11.2 accepts one id twice). */
  readonly first: Map<string, number>;
  /**
   * Positions of the routes that may take requests for any host: no matcher sets, a matcher set without a
   * host matcher, or a wildcard host.
   */
  readonly anyHost: readonly number[];
  /** Position of the route holding each exact host (lowercase), or positions when several do. */
  readonly byHost: ReadonlyMap<string, number | readonly number[]>;
}

export function indexRoutes(routes: readonly RouteJson[]): RoutesIndex {
  const first = new Map<string, number>();
  const anyHost: number[] = [];
  const byHost = new Map<string, number | number[]>();
  for (let i = 0; i < routes.length; i++) {
    const r = routes[i] as RouteJson;
    const id = r["@id"];
    if (typeof id === "string" && !first.has(id)) first.set(id, i);
    if (typeof id === "string" && id.startsWith(AGENT_ROUTE_ID_PREFIX)) continue;
    if (takesAnyHost(r)) {
      anyHost.push(i);
      continue;
    }
    for (const set of r.match as NonNullable<RouteJson["match"]>)
      for (const h of set.host as string[]) {
        const key = h.toLowerCase();
        const at = byHost.get(key);
        if (at === undefined) byHost.set(key, i);
        else if (typeof at === "number") {
          if (at !== i) byHost.set(key, [at, i]);
        } else if (at[at.length - 1] !== i) at.push(i);
      }
  }
  return { first, anyHost, byHost };
}

/** A matcher set that takes requests for any host: it has no host matcher, or a wildcard host. */
const anyHostSet = (set: { host?: string[] }) =>
  !Array.isArray(set.host) || set.host.some((h) => h.includes("*"));

/** A route that may take requests for any host: no matcher sets, or one that takes any host. */
const takesAnyHost = ({ match }: RouteJson) =>
  !Array.isArray(match) || match.length === 0 || match.some(anyHostSet);

/**
 * Whether `route` could shadow a route for any of `hosts` (lowercase): it is a catch-all, has a wildcard
 * host, or has one of those hosts. What `RoutesIndex` answers for the routes read; a plan asks this only of
 * the routes its own changes put in.
 */
function mayShadow(route: RouteJson, hosts: ReadonlySet<string>): boolean {
  if (!Array.isArray(route.match) || route.match.length === 0) return true;
  return route.match.some(
    (set) => anyHostSet(set) || (set.host as string[]).some((h) => hosts.has(h.toLowerCase())),
  );
}

export interface Plan {
  routes: RouteJson[];
  /** Each op's end as planned: applied, or refused. */
  outcomes: ChangeEnd[];
  /** What one successful op did, for writing it as a single targeted change. */
  applied: { index: number; op: Op; at: number; wasPresent: boolean }[];
}

/**
 * Applies ops in arrival order to a copy of the routes array, each against the result of the ones before
 * it, as if they had run one after another. `existsElsewhere` says whether an id is used outside this array;
 * `index` is `indexRoutes(current)`, passed when the caller keeps one for the array.
 */
export function plan(
  current: readonly RouteJson[],
  ops: readonly Op[],
  existsElsewhere: ReadonlySet<string>,
  index: RoutesIndex = indexRoutes(current),
): Plan {
  const planning = new Planning(current, ops, index);
  ops.forEach((op, i) => {
    planning.apply(op, i, existsElsewhere);
  });
  return { routes: planning.routes, outcomes: planning.outcomes, applied: planning.applied };
}

/** One plan under way: the routes as the ops so far left them, and what each op did. */
class Planning {
  readonly routes: RouteJson[];
  readonly outcomes: ChangeEnd[] = [];
  readonly applied: Plan["applied"] = [];
  /** The hosts of the routes the ops write (lowercase). */
  private readonly newHosts: Set<string>;
  /**
   * The routes that may shadow a new one (those for any host, and those holding one of the new hosts), each
   * with the order in which it became one.
   */
  private readonly candidates = new Map<RouteJson, number>();
  /** The candidates holding each exact host (lowercase): a host's owner is found without a scan. */
  private readonly holders = new Map<string, RouteJson[]>();
  /** The candidates that may take requests for any host: they are tested against each new host. */
  private readonly wide: RouteJson[] = [];
  /** Candidates the ops so far replaced or removed. */
  private readonly gone = new Set<RouteJson>();
  /** The first route holding each id the ops touched (null: none any more); others are in the index. */
  private readonly touched = new Map<string, RouteJson | null>();

  constructor(
    private readonly current: readonly RouteJson[],
    ops: readonly Op[],
    private readonly index: RoutesIndex,
  ) {
    this.routes = [...current];
    this.newHosts = new Set(
      ops.flatMap((op) => (op.kind === "delete" ? [] : hostsOf(op.route))).map((h) => h.toLowerCase()),
    );
    const add = (i: number) => {
      const r = current[i];
      if (r) this.addCandidate(r);
    };
    index.anyHost.forEach(add);
    for (const h of this.newHosts) {
      const at = index.byHost.get(h);
      if (typeof at === "number") add(at);
      else at?.forEach(add);
    }
  }

  apply(op: Op, index: number, existsElsewhere: ReadonlySet<string>): void {
    const id = opId(op);
    const at = this.indexOfId(id);
    switch (op.kind) {
      case "create":
        if (at !== -1 || existsElsewhere.has(id)) this.refuse({ kind: "exists" });
        else if (!this.refusedForHost(op.route)) this.insert(op, index, op.route);
        return;
      case "put":
        if (at === -1) this.insert(op, index, op.route);
        else this.replaceAt(op, index, at, op.route);
        return;
      case "replace":
        if (at === -1) this.refuse({ kind: "not_found" });
        else if (!this.refusedForHost(op.route)) this.replaceAt(op, index, at, op.route);
        return;
      case "delete":
        if (at === -1) this.refuse({ kind: "not_found" });
        else this.remove(op, index, at, id);
        return;
    }
  }

  /**
   * Refuses a route one of whose exact hosts another route (another @id) serves as an exact host: a host
   * belongs to one route. Only the candidates can hold one of the new hosts; wildcards keep placement's rules.
   */
  private refusedForHost(route: RouteJson & { "@id": string }): boolean {
    const hosts = new Set(exactHosts(route));
    // Of the routes still there that hold one of its hosts, the one that became a candidate first is named.
    let owner: RouteJson | undefined;
    for (const h of hosts)
      for (const c of this.holders.get(h) ?? []) {
        if (c["@id"] === route["@id"] || this.gone.has(c)) continue;
        if (owner === undefined || (this.candidates.get(c) ?? 0) < (this.candidates.get(owner) ?? 0))
          owner = c;
      }
    if (owner === undefined) return false;
    const host = exactHosts(owner).find((h) => hosts.has(h)) as string;
    this.refuse({ kind: "host_taken", host, owner: typeof owner["@id"] === "string" ? owner["@id"] : null });
    return true;
  }

  /**
   * Where a route goes: the lowest position of a candidate that may shadow it (one holding one of its
   * hosts, or one taking any host that matches one), else the end.
   */
  private placement(route: RouteJson): number {
    const hosts = hostsOf(route);
    let best = this.routes.length;
    if (hosts.length === 0) return best;
    const consider = (c: RouteJson) => {
      const i = this.routes.indexOf(c);
      if (i !== -1 && i < best) best = i;
    };
    for (const c of this.wide) if (hosts.some((h) => routeShadows(c, h))) consider(c);
    for (const h of hosts) for (const c of this.holders.get(h.toLowerCase()) ?? []) consider(c);
    return best;
  }

  private addCandidate(route: RouteJson): void {
    if (this.candidates.has(route)) return;
    this.candidates.set(route, this.candidates.size);
    if (takesAnyHost(route)) this.wide.push(route);
    for (const h of new Set(exactHosts(route))) {
      const list = this.holders.get(h);
      if (list) list.push(route);
      else this.holders.set(h, [route]);
    }
  }

  private insert(op: Op, index: number, route: RouteJson & { "@id": string }): void {
    const pos = this.placement(route);
    this.routes.splice(pos, 0, route);
    if (mayShadow(route, this.newHosts)) this.addCandidate(route);
    if (this.firstWithId(route["@id"]) === undefined) this.touched.set(route["@id"], route);
    this.outcomes.push({ outcome: { kind: "applied", route }, previous: null });
    this.applied.push({ index, op, at: pos, wasPresent: false });
  }

  private replaceAt(op: Op, index: number, at: number, route: RouteJson & { "@id": string }): void {
    const previous = this.routes[at] ?? null;
    this.routes[at] = route;
    if (previous) this.gone.add(previous);
    if (mayShadow(route, this.newHosts)) this.addCandidate(route);
    this.touched.set(route["@id"], route);
    this.outcomes.push({ outcome: { kind: "applied", route }, previous });
    this.applied.push({ index, op, at, wasPresent: true });
  }

  private remove(op: Op, index: number, at: number, id: string): void {
    const previous = this.routes[at] ?? null;
    this.routes.splice(at, 1);
    if (previous) this.gone.add(previous);
    // Caddy before 2.11.2 accepts one id twice: the next route holding it is then the first.
    this.touched.set(id, this.routes.find((r) => r["@id"] === id) ?? null);
    this.outcomes.push({ outcome: { kind: "applied", route: null }, previous });
    this.applied.push({ index, op, at, wasPresent: true });
  }

  private refuse(refusal: Refusal): void {
    this.outcomes.push({ outcome: refusal, previous: null });
  }

  private firstWithId(id: string): RouteJson | undefined {
    const t = this.touched.get(id);
    if (t !== undefined) return t ?? undefined;
    const at = this.index.first.get(id);
    return at === undefined ? undefined : this.current[at];
  }

  private indexOfId(id: string): number {
    const r = this.firstWithId(id);
    return r === undefined ? -1 : this.routes.indexOf(r);
  }
}
