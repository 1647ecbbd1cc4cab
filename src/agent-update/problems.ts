import { ApiError } from "../http/errors.js";
import {
  AgentUpdateInProgressError,
  AgentUpdateNotConfiguredError,
  AgentUpdateNotFoundError,
  AgentUpdateUnsupportedError,
} from "./errors.js";

/** The agent-update area's errors as problems; a refused update names the one under way as `update_id`. */
export function agentUpdateProblem(err: unknown): ApiError | undefined {
  if (err instanceof AgentUpdateUnsupportedError)
    return new ApiError("agent_update_unsupported", err.message);
  if (err instanceof AgentUpdateNotConfiguredError)
    return new ApiError("agent_update_not_configured", err.message);
  if (err instanceof AgentUpdateNotFoundError) return new ApiError("agent_update_not_found", err.message);
  if (err instanceof AgentUpdateInProgressError)
    return new ApiError("update_in_progress", err.message, { extensions: { update_id: err.runningId } });
  return undefined;
}
