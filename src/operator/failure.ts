/** Why fetching or authenticating a release failed (operator/artifacts): the operator's and the agent's updates'. */
export const artifactErrorCodes = [
  "source_denied",
  "artifact_not_found",
  "artifact_too_large",
  "download_failed",
  "checksum_unavailable",
  "checksum_mismatch",
  "signature_missing",
  "signature_unknown_key",
  "signature_invalid",
  "signature_mismatch",
] as const;

/** Why an update failed or was rolled back; reported as `error.code` in its status and callbacks. */
export const updateErrorCodes = [
  ...artifactErrorCodes,
  "install_failed",
  "start_failed",
  "health_check_failed",
  "switch_failed",
  "new_instance_failed",
  "agent_restarted",
  "rollback_failed",
  "internal_error",
] as const;

export type UpdateErrorCode = (typeof updateErrorCodes)[number];

/** A step of an update failed; `retryable` tells the downloader whether another attempt may help. */
export class UpdateFailure extends Error {
  constructor(
    readonly code: UpdateErrorCode,
    message: string,
    readonly retryable = false,
  ) {
    super(message);
    this.name = "UpdateFailure";
  }
}
