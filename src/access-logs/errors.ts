/** The route exists but writes no access log (it was written without `access_log: true`). */
export class AccessLogNotFoundError extends Error {
  override readonly name = "AccessLogNotFoundError";
}
