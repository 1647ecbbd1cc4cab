import type { ChangeOutcome, RouteJson } from "../caddy/routes/plan.js";

/**
 * Why a route change or read did not happen, as the routes service says it. These know nothing of HTTP;
 * `proxyProblem` (problems.ts) turns each into the API's answer. Messages are the answer's detail, except
 * where Caddy's own words are kept: those still hold file paths, which only the log may show.
 */

/** The managed server has no such route (or the agent recorded no change of it, for a history or restore). */
export class RouteNotFoundError extends Error {
  override readonly name = "RouteNotFoundError";
}

/** A route with the id a create derives is already in Caddy's config (or is the operator's route). */
export class RouteExistsError extends Error {
  override readonly name = "RouteExistsError";
}

/** Another route serves one of the hosts (domain or `redirect_from`) of a created or replaced route. */
export class HostTakenError extends Error {
  override readonly name = "HostTakenError";

  constructor(
    message: string,
    readonly host: string,
    /** The @id of the route that serves it; null for a route without one. */
    readonly owner: string | null,
  ) {
    super(message);
  }
}

/** No write request makes the route Caddy holds: it was written by hand, or changed in Caddy since. */
export class RouteNotWrittenError extends Error {
  override readonly name = "RouteNotWrittenError";
}

/** The operator's route is the agent's own: the API cannot change it. */
export class OperatorRouteImmutableError extends Error {
  override readonly name = "OperatorRouteImmutableError";

  constructor(readonly routeId: string) {
    super(`${routeId} is the operator's route; the agent manages it and the API cannot change it`);
  }
}

/** A route the agent keeps itself (the HTTPS redirect, an `@id` no domain can take): the API cannot change it. */
export class AgentRouteImmutableError extends Error {
  override readonly name = "AgentRouteImmutableError";

  constructor(readonly routeId: string) {
    super(`${routeId} is a route the agent keeps itself (docs/https.md); the API cannot change it`);
  }
}

/**
 * A route write or restore that would make a route answer for the operator's domain: a host of its
 * matchers covers it (`redirect_from` naming it, a wildcard domain over it), or a matcher set takes any host.
 */
export class OperatorDomainReservedError extends Error {
  override readonly name = "OperatorDomainReservedError";

  constructor(
    message: string,
    readonly operatorDomain: string,
    /** The host that covers it; null for a matcher set without a host matcher. */
    readonly coveredBy: string | null,
  ) {
    super(message);
  }
}

/** A replace whose domain derives to another id than the route it names. */
export class RouteIdMismatchError extends Error {
  override readonly name = "RouteIdMismatchError";

  constructor(
    readonly derived: string,
    readonly routeId: string,
  ) {
    super(`domain derives to @id ${derived}, not to the route_id ${routeId} of the path`);
  }
}

/** A restore names a change the route does not have. */
export class ChangeNotFoundError extends Error {
  override readonly name = "ChangeNotFoundError";
}

/** A restore does not fit the route as it is now (or its change is still being applied); nothing changed. */
export class RestoreConflictError extends Error {
  override readonly name = "RestoreConflictError";
}

/**
 * Caddy could not be reached or answered with an error: nothing was changed, or a failed change was put
 * back (`message` says which). `caddyMessage` is Caddy's or the connection's own words, for the log.
 */
export class ProxyUnavailableError extends Error {
  override readonly name = "ProxyUnavailableError";

  constructor(readonly caddyMessage: string) {
    super(caddyMessage);
  }
}

/** Caddy refused the new config and keeps its previous one. */
export class ChangeRejectedError extends Error {
  override readonly name = "ChangeRejectedError";

  constructor(readonly caddyMessage: string) {
    super(`Caddy refused the change and keeps its previous config: ${caddyMessage}`);
  }
}

/** The change failed after Caddy may have changed, and putting the captured state back failed too. */
export class RollbackFailedError extends Error {
  override readonly name = "RollbackFailedError";

  constructor(
    readonly caddyMessage: string,
    /** The route as it was before the change, for the caller to put back itself. */
    readonly capturedState: RouteJson | null,
  ) {
    super(caddyMessage);
  }
}

/** The change's record (and its backup event) could not be written, so Caddy was not touched. */
export class ChangeNotRecordedError extends Error {
  override readonly name = "ChangeNotRecordedError";

  constructor(readonly reason: string) {
    super("the agent could not record the change before applying it");
  }
}

/** The route that serves a host, as answers name it: its @id, or null for a route without one. */
export const routeNamed = (owner: string | null): string =>
  owner === null ? "a route without an @id" : `route ${owner}`;

/** Why a route may not serve `host`: `owner` serves it. */
export const hostTakenText = (host: string, owner: string | null): string =>
  `host ${host} is served by ${routeNamed(owner)}`;

/**
 * The error a change of route `id` that did not apply answers with; `previous` is the state it captured
 * (what a failed rollback leaves for the caller to put back).
 */
export function changeError(
  outcome: Exclude<ChangeOutcome, { kind: "applied" }>,
  id: string,
  previous: RouteJson | null,
): Error {
  switch (outcome.kind) {
    case "exists":
      return new RouteExistsError(`a route with @id ${id} already exists in Caddy's config`);
    case "not_found":
      return new RouteNotFoundError(`the managed server has no route with @id ${id}`);
    case "host_taken":
      return new HostTakenError(hostTakenText(outcome.host, outcome.owner), outcome.host, outcome.owner);
    case "unavailable":
    case "rolled_back":
      return new ProxyUnavailableError(outcome.message);
    case "rejected":
      return new ChangeRejectedError(outcome.message);
    case "rollback_failed":
      return new RollbackFailedError(outcome.message, previous);
    case "capture_failed":
      return new ChangeNotRecordedError(outcome.message);
  }
}
