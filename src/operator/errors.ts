/**
 * Why the operator area refused a request. They know nothing of HTTP: `problems.ts` turns them into the
 * API's problems. (Why an update itself failed is an `UpdateFailure`, recorded in its status, not thrown
 * at a caller.)
 */

/** Without the operator's domain there is no route to switch, so no update can run. */
export class OperatorNotConfiguredError extends Error {
  constructor() {
    super(
      "the operator's domain (HOSTKEEPER_OPERATOR_DOMAIN) is not configured, so there is no route to switch",
    );
    this.name = "OperatorNotConfiguredError";
  }
}

/** No update process has this id. */
export class UpdateNotFoundError extends Error {
  constructor(readonly updateId: string) {
    super(`no update process with id ${updateId}`);
    this.name = "UpdateNotFoundError";
  }
}

/** Another update is unfinished; only one runs at a time. */
export class UpdateInProgressError extends Error {
  constructor(readonly runningId: string) {
    super(`update ${runningId} is in progress; try again when it ends`);
    this.name = "UpdateInProgressError";
  }
}

/** The id was used before for an update requested with a different body. */
export class UpdateIdConflictError extends Error {
  constructor(readonly updateId: string) {
    super(`update ${updateId} was requested before with a different body`);
    this.name = "UpdateIdConflictError";
  }
}

/** No operator instance is installed, or the active one does not run or answer its health path. */
export class RunningInstanceUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RunningInstanceUnavailableError";
  }
}
