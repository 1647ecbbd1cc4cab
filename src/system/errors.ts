import type { HookRecord } from "./hooks/hooks.js";

/** Who holds a package manager's lock, as the manager reported it. */
export interface LockHolder {
  pid: number | undefined;
  name: string | undefined;
  /** The lock: a file path, or a description. */
  lock: string;
}

/**
 * A package-manager command that did not do its job: it exited non-zero or by a signal, ran past its
 * time-out, or is not installed. Carries what a caller needs to say why: the command, its exit, and the
 * manager's own error lines (never its whole output). Knows nothing of HTTP; the system routes turn it
 * into a problem.
 */
export class CommandError extends Error {
  readonly code = "package_manager_failed";
  readonly command: string;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly lines: readonly string[];

  constructor(
    message: string,
    o: { command: string; exitCode?: number | null; signal?: string | null; lines?: readonly string[] },
  ) {
    super(message);
    this.name = "CommandError";
    this.command = o.command;
    this.exitCode = o.exitCode ?? null;
    this.signal = o.signal ?? null;
    this.lines = o.lines ?? [];
  }
}

/** The package manager's lock (or this agent's own) stayed held past the lock time-out. */
export class PackageManagerBusyError extends Error {
  readonly code = "package_manager_busy";
  readonly holder: LockHolder;

  constructor(holder: LockHolder, waitedMs: number) {
    const who =
      holder.pid === undefined
        ? "another process"
        : `process ${holder.pid}${holder.name ? ` (${holder.name})` : ""}`;
    super(
      `the package manager is busy: ${holder.lock} is held by ${who}; gave up after waiting ${waitedMs / 1000} s`,
    );
    this.name = "PackageManagerBusyError";
    this.holder = holder;
  }
}

/** A failed apply, after it was recorded in the history as `applyId`; `cause` is why it failed. */
export class ApplyFailedError extends Error {
  readonly applyId: number;

  constructor(applyId: number, cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.name = "ApplyFailedError";
    this.applyId = applyId;
  }
}

/** No apply has this id. */
export class ApplyNotFoundError extends Error {
  readonly code = "apply_not_found";

  constructor(readonly applyId: number) {
    super(`no apply has the id ${applyId}`);
    this.name = "ApplyNotFoundError";
  }
}

/** No maintenance schedule is set. */
export class ScheduleNotFoundError extends Error {
  readonly code = "schedule_not_found";

  constructor() {
    super("no maintenance schedule is set (PUT /v1/system/schedule sets one)");
    this.name = "ScheduleNotFoundError";
  }
}

/** A filesystem without the room an operation needs: free and needed in MB (MiB). */
export interface ShortFilesystem {
  path: string;
  free_mb: number;
  needed_mb: number;
}

/**
 * A download or an apply refused before it started (nothing was recorded or changed): a filesystem it would
 * write has less free space than the package manager says it needs, plus the minimum to keep free.
 */
export class InsufficientStorageError extends Error {
  readonly code = "insufficient_storage";

  constructor(
    readonly operation: "download" | "apply",
    readonly filesystems: readonly ShortFilesystem[],
    minFreeMb: number,
  ) {
    const each = filesystems.map((f) => `${f.path} has ${f.free_mb} MB free of ${f.needed_mb} MB needed`);
    super(
      `not enough free space to ${operation} the updates: ${each.join("; ")} (what the package manager downloads and installs, plus ${minFreeMb} MB kept free)`,
    );
    this.name = "InsufficientStorageError";
  }
}

/**
 * A pre-apply hook of the host did not succeed (it failed, ran past its time-out, or was refused as unsafe):
 * the apply stopped before the package manager changed anything.
 */
export class HookFailedError extends Error {
  readonly code = "hook_failed";

  constructor(
    message: string,
    readonly hook: HookRecord,
  ) {
    super(message);
    this.name = "HookFailedError";
  }
}

export type SystemError = CommandError | PackageManagerBusyError | HookFailedError;

export const isSystemError = (err: unknown): err is SystemError =>
  err instanceof CommandError || err instanceof PackageManagerBusyError || err instanceof HookFailedError;
