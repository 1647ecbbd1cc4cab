import { ApiError } from "../http/errors.js";
import { TokenRotationError } from "./errors.js";

const CODE = {
  not_found: "token_not_found",
  not_rotatable: "token_not_rotatable",
  failed: "token_rotation_failed",
} as const;

/**
 * The access area's errors as problems: the one place they meet HTTP. A failed rotation keeps its cause, which
 * the edge logs with the 500. Anything else is not the access area's to map.
 */
export function accessProblem(err: unknown): ApiError | undefined {
  if (!(err instanceof TokenRotationError)) return undefined;
  return new ApiError(CODE[err.kind], err.message, err.cause === undefined ? {} : { cause: err.cause });
}
