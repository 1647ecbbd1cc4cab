import { UpdateFailure } from "../operator/failure.js";
import { type AgentUpdateErrorCode, agentUpdateErrorCodes } from "./schemas.js";

/** Why an agent update failed: its code and words, recorded in its status. */
export class AgentUpdateFailure extends Error {
  constructor(
    readonly code: AgentUpdateErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "AgentUpdateFailure";
  }
}

const known = new Set<string>(agentUpdateErrorCodes);

/** Any error as a failure: a download's or a signature's keeps its code. */
export function failureOf(err: unknown): AgentUpdateFailure {
  if (err instanceof AgentUpdateFailure) return err;
  if (err instanceof UpdateFailure)
    return new AgentUpdateFailure(
      known.has(err.code) ? (err.code as AgentUpdateErrorCode) : "internal_error",
      err.message,
    );
  return new AgentUpdateFailure("internal_error", (err as Error).message || String(err));
}
