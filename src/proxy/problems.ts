import { ApiError } from "../http/errors.js";
import { UnsafePathError } from "../util/shared-folder.js";
import { withoutPaths } from "../util/without-paths.js";
import {
  AgentRouteImmutableError,
  ChangeNotFoundError,
  ChangeNotRecordedError,
  ChangeRejectedError,
  HostTakenError,
  OperatorDomainReservedError,
  OperatorRouteImmutableError,
  ProxyUnavailableError,
  RestoreConflictError,
  RollbackFailedError,
  RouteExistsError,
  RouteIdMismatchError,
  RouteNotFoundError,
  RouteNotWrittenError,
} from "./errors.js";

/**
 * The routes area's errors as problems: the one place they meet HTTP. Caddy's words reach the client with
 * file paths and socket addresses taken out; the untouched text is the problem's cause, which the edge
 * logs for a 5xx. Anything else is not the routes area's to map.
 */
export function proxyProblem(err: unknown): ApiError | undefined {
  if (err instanceof RouteNotFoundError) return new ApiError("route_not_found", err.message);
  if (err instanceof RouteExistsError) return new ApiError("route_exists", err.message);
  if (err instanceof HostTakenError)
    return new ApiError("host_conflict", err.message, {
      extensions: { host: err.host, route_id: err.owner },
    });
  if (err instanceof RouteNotWrittenError) return new ApiError("route_request_unknown", err.message);
  if (err instanceof AgentRouteImmutableError) return new ApiError("agent_route_immutable", err.message);
  if (err instanceof OperatorRouteImmutableError)
    return new ApiError("operator_route_immutable", err.message);
  if (err instanceof OperatorDomainReservedError)
    return new ApiError("operator_domain_reserved", err.message, {
      extensions: { operator_domain: err.operatorDomain, covered_by: err.coveredBy },
    });
  if (err instanceof RouteIdMismatchError)
    return new ApiError("validation_failed", `body.${err.message}`, {
      errors: [{ field: "body.domain", message: `derives to ${err.derived}, not to ${err.routeId}` }],
    });
  if (err instanceof ChangeNotFoundError) return new ApiError("change_not_found", err.message);
  if (err instanceof RestoreConflictError) return new ApiError("restore_conflict", err.message);
  if (err instanceof ProxyUnavailableError)
    return new ApiError("proxy_unavailable", withoutPaths(err.message), { cause: err.caddyMessage });
  if (err instanceof ChangeRejectedError)
    return new ApiError("proxy_rejected_change", withoutPaths(err.message), { cause: err.caddyMessage });
  if (err instanceof RollbackFailedError)
    return new ApiError("proxy_rollback_failed", withoutPaths(err.message), {
      cause: err.caddyMessage,
      extensions: { captured_state: err.capturedState },
    });
  if (err instanceof UnsafePathError) return new ApiError("unsafe_file", err.withoutFolders());
  if (err instanceof ChangeNotRecordedError)
    return new ApiError("internal_error", err.message, { cause: err.reason });
  return undefined;
}
