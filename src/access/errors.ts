/** Why a token could not be rotated. Knows nothing of HTTP: `problems.ts` turns it into the API's problem. */
export class TokenRotationError extends Error {
  constructor(
    /** `not_found`: no such token; `not_rotatable`: it is configuration; `failed`: it could not be stored. */
    readonly kind: "not_found" | "not_rotatable" | "failed",
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "TokenRotationError";
  }
}
