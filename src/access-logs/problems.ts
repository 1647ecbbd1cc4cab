import { ApiError } from "../http/errors.js";
import { AccessLogNotFoundError } from "./errors.js";

/** The access logs' errors as problems: the one place they meet HTTP. Anything else is not theirs to map. */
export function accessLogProblem(err: unknown): ApiError | undefined {
  if (err instanceof AccessLogNotFoundError) return new ApiError("access_log_not_found", err.message);
  return undefined;
}
