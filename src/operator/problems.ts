import { ApiError } from "../http/errors.js";
import {
  OperatorNotConfiguredError,
  RunningInstanceUnavailableError,
  UpdateIdConflictError,
  UpdateInProgressError,
  UpdateNotFoundError,
} from "./errors.js";

/**
 * The operator area's errors as problems: the one place they meet HTTP. A refused update names the one in
 * progress as `update_process_id`. No `cause`: the edge logs a 5xx problem's cause, and these are answers
 * whose detail says all there is. Anything else is not the operator area's to map.
 */
export function operatorProblem(err: unknown): ApiError | undefined {
  if (err instanceof OperatorNotConfiguredError) return new ApiError("operator_not_configured", err.message);
  if (err instanceof UpdateNotFoundError) return new ApiError("update_not_found", err.message);
  if (err instanceof UpdateIdConflictError) return new ApiError("update_id_conflict", err.message);
  if (err instanceof UpdateInProgressError)
    return new ApiError("update_in_progress", err.message, {
      extensions: { update_process_id: err.runningId },
    });
  if (err instanceof RunningInstanceUnavailableError)
    return new ApiError("running_instance_unavailable", err.message);
  return undefined;
}
