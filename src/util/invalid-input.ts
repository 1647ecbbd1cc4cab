/** One field of a request that a domain check found wrong. */
export interface InputIssue {
  /** Where in the request's body, as a path from its top: `domain`, `upstreams[1].dial`. */
  field: string;
  message: string;
}

/**
 * Input that passed the request schema but not a domain rule (a domain that does not normalise, weights
 * that sum to 0). Thrown by services, which know their inputs but not where they came from; the HTTP edge
 * answers it as a 400 `validation_failed` naming each field in the body.
 */
export class InvalidInputError extends Error {
  constructor(readonly issues: readonly InputIssue[]) {
    super(issues.map((i) => `${i.field} ${i.message}`).join("; "));
    this.name = "InvalidInputError";
  }
}
