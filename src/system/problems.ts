import { ApiError } from "../http/errors.js";
import {
  ApplyFailedError,
  ApplyNotFoundError,
  type CommandError,
  HookFailedError,
  InsufficientStorageError,
  isSystemError,
  PackageManagerBusyError,
  ScheduleNotFoundError,
  type SystemError,
} from "./errors.js";

function problemOf(err: SystemError, extra: Record<string, unknown>): ApiError {
  if (err instanceof PackageManagerBusyError)
    return new ApiError("package_manager_busy", err.message, {
      cause: err,
      extensions: {
        lock_holder: { pid: err.holder.pid ?? null, name: err.holder.name ?? null, lock: err.holder.lock },
        ...extra,
      },
    });
  if (err instanceof HookFailedError)
    return new ApiError("hook_failed", err.message, { cause: err, extensions: { hook: err.hook, ...extra } });
  const command = err as CommandError;
  return new ApiError("package_manager_failed", command.message, {
    cause: err,
    extensions:
      command.exitCode === null && command.signal === null && command.lines.length === 0
        ? extra
        : { command: command.command, exit_code: command.exitCode, manager_errors: command.lines, ...extra },
  });
}

/**
 * The system area's errors as problems: the one place they meet HTTP. An apply that failed carries its
 * history id as `apply_id`. Anything else is not the system area's to map.
 */
export function systemProblem(err: unknown): ApiError | undefined {
  if (err instanceof ApplyNotFoundError) return new ApiError("apply_not_found", err.message, { cause: err });
  if (err instanceof ScheduleNotFoundError)
    return new ApiError("schedule_not_found", err.message, { cause: err });
  if (err instanceof InsufficientStorageError)
    return new ApiError("insufficient_storage", err.message, {
      cause: err,
      extensions: { filesystems: err.filesystems },
    });
  if (err instanceof ApplyFailedError)
    return isSystemError(err.cause) ? problemOf(err.cause, { apply_id: err.applyId }) : undefined;
  return isSystemError(err) ? problemOf(err, {}) : undefined;
}
