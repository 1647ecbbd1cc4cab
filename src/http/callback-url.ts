import { callbackUrlProblem, type DenyList } from "../events/egress.js";
import type { FieldError } from "./errors.js";

/**
 * The one check of a request's `callback_url` (routes, applies, operator updates), at the HTTP edge: absolute
 * http(s), no credentials, not an address the deny list refuses; or `hostkeeper:connection` when the agent has one. Absent and null ask for no callback. Each
 * route adds what it returns to its other field errors, so one 400 names every offending field.
 */
export function callbackUrlError(
  url: string | null | undefined,
  deny: DenyList,
  field = "body.callback_url",
): FieldError | undefined {
  if (url === undefined || url === null) return undefined;
  const message = callbackUrlProblem(url, deny);
  return message === undefined ? undefined : { field, message };
}
