import type { FastifyError, FastifyReply } from "fastify";
import { type InputIssue, InvalidInputError } from "../util/invalid-input.js";
import { plural } from "../util/text.js";

/**
 * The closed set of problem codes the API answers with. Each has one status and one title; the code also
 * forms the problem `type` URI, so a client can branch on either.
 */
export const problemCodes = {
  validation_failed: { status: 400, title: "Request validation failed" },
  malformed_body: { status: 400, title: "Malformed request body" },
  malformed_request: { status: 400, title: "Malformed request" },
  unauthorized: { status: 401, title: "Missing or invalid bearer token" },
  insufficient_scope: { status: 403, title: "Token lacks a scope the route requires" },
  operator_route_immutable: { status: 403, title: "Operator route is immutable" },
  agent_route_immutable: { status: 403, title: "The agent's own route is immutable" },
  not_found: { status: 404, title: "Not found" },
  route_not_found: { status: 404, title: "Route not found" },
  change_not_found: { status: 404, title: "Route change not found" },
  access_log_not_found: { status: 404, title: "Route has no access log" },
  event_not_found: { status: 404, title: "Event not found" },
  update_not_found: { status: 404, title: "Update process not found" },
  apply_not_found: { status: 404, title: "Apply not found" },
  agent_update_not_found: { status: 404, title: "Agent update not found" },
  schedule_not_found: { status: 404, title: "No maintenance schedule is set" },
  token_not_found: { status: 404, title: "Token not found" },
  certificate_not_found: { status: 404, title: "Custom certificate not found" },
  method_not_allowed: { status: 405, title: "Method not allowed" },
  route_exists: { status: 409, title: "Route already exists" },
  host_conflict: { status: 409, title: "Host is served by another route" },
  operator_domain_reserved: { status: 409, title: "Operator's domain is reserved to the agent" },
  route_request_unknown: { status: 409, title: "No write request makes the route as Caddy holds it" },
  restore_conflict: { status: 409, title: "Restore does not apply to the route as it is now" },
  event_pending: { status: 409, title: "Event is still pending" },
  update_in_progress: { status: 409, title: "Update already in progress" },
  update_id_conflict: { status: 409, title: "Update process id already used with a different request" },
  request_id_reused: { status: 409, title: "Request id already used for another request" },
  token_not_rotatable: { status: 409, title: "Token is configuration and cannot be rotated by the agent" },
  hook_failed: { status: 409, title: "A pre-apply hook of the host refused the apply" },
  agent_update_unsupported: { status: 409, title: "Self-update needs the packaged service" },
  agent_update_not_configured: { status: 409, title: "No key is trusted for the agent's packages" },
  request_timeout: { status: 408, title: "Request timed out" },
  payload_too_large: { status: 413, title: "Request body too large" },
  unsupported_media_type: { status: 415, title: "Unsupported media type" },
  expectation_failed: { status: 417, title: "Expectation failed" },
  too_many_failed_authentications: { status: 429, title: "Too many failed authentications" },
  request_header_fields_too_large: { status: 431, title: "Request header fields too large" },
  internal_error: { status: 500, title: "Internal server error" },
  package_manager_busy: { status: 500, title: "Package manager busy" },
  package_manager_failed: { status: 500, title: "Package manager failed" },
  token_rotation_failed: { status: 500, title: "Token rotation could not be stored" },
  unsafe_file: {
    status: 500,
    title: "A file or folder another user can change failed the agent's checks, and was not used",
  },
  proxy_unavailable: { status: 503, title: "Proxy unavailable" },
  proxy_rejected_change: { status: 503, title: "Proxy rejected the change" },
  proxy_rollback_failed: { status: 503, title: "Proxy change failed and rollback failed" },
  running_instance_unavailable: { status: 503, title: "Running instance unavailable" },
  operator_not_configured: { status: 503, title: "Operator self-update is not configured" },
  certificate_storage_unknown: {
    status: 503,
    title: "Caddy's certificate storage is not known to the agent",
  },
  insufficient_storage: { status: 507, title: "Insufficient storage" },
} as const satisfies Record<string, { status: number; title: string }>;

export type ProblemCode = keyof typeof problemCodes;

export const problemTypeUri = (code: ProblemCode) => `urn:hostkeeper:problem:${code}`;

export interface FieldError {
  /** JSON pointer-ish location, e.g. `body.upstreams[1].dial`. */
  field: string;
  message: string;
}

/**
 * The one error class of the API's answers. Request-level checks throw it; an area whose errors are its own
 * (the system area's command failures) maps them to it at the HTTP edge. Only the handler turns it into HTTP.
 */
export class ApiError extends Error {
  readonly code: ProblemCode;
  readonly status: number;
  readonly errors: FieldError[] | undefined;
  /** Extension members added to the problem body (RFC 9457 section 3.2). */
  readonly extensions: Record<string, unknown> | undefined;
  /** Response headers the problem needs (`Retry-After`, `WWW-Authenticate` with a scope). */
  readonly headers: Record<string, string> | undefined;

  constructor(
    code: ProblemCode,
    detail: string,
    opts: {
      errors?: FieldError[];
      extensions?: Record<string, unknown>;
      headers?: Record<string, string>;
      cause?: unknown;
    } = {},
  ) {
    super(detail, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = "ApiError";
    this.code = code;
    this.status = problemCodes[code].status;
    this.errors = opts.errors;
    this.extensions = opts.extensions;
    this.headers = opts.headers;
  }
}

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: ProblemCode;
  errors?: FieldError[];
  [extension: string]: unknown;
}

export function problemBody(err: ApiError): ProblemBody {
  const body: ProblemBody = {
    ...err.extensions,
    type: problemTypeUri(err.code),
    title: problemCodes[err.code].title,
    status: err.status,
    detail: err.message,
    code: err.code,
  };
  if (err.errors) body.errors = err.errors;
  return body;
}

interface AjvError {
  instancePath?: string;
  schemaPath?: string;
  keyword?: string;
  message?: string;
  params?: Record<string, unknown>;
}

const typeNames: Record<string, string> = {
  string: "a string",
  integer: "an integer",
  number: "a number",
  boolean: "a boolean",
  array: "an array",
  object: "an object",
  null: "null",
};

/** One sentence per validator keyword, in the words of the API's documentation rather than the validator's. */
function keywordMessage(v: AjvError): string {
  const p = v.params ?? {};
  switch (v.keyword) {
    case "enum":
      return Array.isArray(p.allowedValues)
        ? `must be one of: ${p.allowedValues.map((x) => (typeof x === "string" ? x : JSON.stringify(x))).join(", ")}`
        : "is not an allowed value";
    case "type": {
      const types = String(p.type ?? "").split(",");
      return `must be ${types.map((t) => typeNames[t] ?? t).join(" or ")}`;
    }
    case "minLength":
      return `must be at least ${plural(Number(p.limit), "character")} long`;
    case "maxLength":
      return `must be at most ${plural(Number(p.limit), "character")} long`;
    case "minimum":
      return `must be at least ${p.limit}`;
    case "maximum":
      return `must be at most ${p.limit}`;
    case "minItems":
      return `must have at least ${plural(Number(p.limit), "item")}`;
    case "maxItems":
      return `must have at most ${plural(Number(p.limit), "item")}`;
    case "pattern":
      return "has characters or a form the field does not allow (see its description)";
    case "required":
      return "is required";
    case "additionalProperties":
      return "is not a known field";
    default:
      return v.message ?? "is invalid";
  }
}

function fieldErrors(context: string | undefined, validation: AjvError[]): FieldError[] {
  const base = context ?? "body";
  // A failed union reports each branch and then itself; its branches' errors say less than one line for it.
  const unions = validation.filter((v) => v.keyword === "anyOf" || v.keyword === "oneOf");
  const kept = validation.filter(
    (v) =>
      !unions.some(
        (u) => u !== v && u.instancePath === v.instancePath && v.schemaPath?.startsWith(`${u.schemaPath}/`),
      ),
  );
  const out: FieldError[] = [];
  for (const v of kept) {
    let path = (v.instancePath ?? "")
      .split("/")
      .filter((p) => p !== "")
      .map((p) => (/^\d+$/.test(p) ? `[${p}]` : `.${p.replace(/~1/g, "/").replace(/~0/g, "~")}`))
      .join("");
    const params = v.params ?? {};
    if (v.keyword === "required" && typeof params.missingProperty === "string")
      path += `.${params.missingProperty}`;
    else if (v.keyword === "additionalProperties" && typeof params.additionalProperty === "string")
      path += `.${params.additionalProperty}`;
    const message =
      v.keyword === "anyOf" || v.keyword === "oneOf" ? unionMessage(validation, v) : keywordMessage(v);
    const field = `${base}${path}`;
    if (!out.some((e) => e.field === field && e.message === message)) out.push({ field, message });
  }
  return out;
}

/** For `type: string | null` style unions: the types the branches accept, else the validator's own words. */
function unionMessage(all: AjvError[], union: AjvError): string {
  const branchTypes = all
    .filter(
      (v) =>
        v.keyword === "type" &&
        v.instancePath === union.instancePath &&
        v.schemaPath?.startsWith(`${union.schemaPath}/`),
    )
    .map((v) => String(v.params?.type ?? ""));
  return branchTypes.length > 0
    ? `must be ${branchTypes.map((t) => typeNames[t] ?? t).join(" or ")}`
    : "does not match any allowed form";
}

/** The `detail` of a validation problem: every offending field and what is wrong with it. */
export function validationDetail(errors: FieldError[]): string {
  return errors.map((e) => `${e.field} ${e.message}`).join("; ");
}

/** A domain check's findings as the body's field errors: `upstreams[1].dial` is `body.upstreams[1].dial`. */
export function bodyFieldErrors(issues: readonly InputIssue[]): FieldError[] {
  return issues.map((i) => ({ field: `body.${i.field}`, message: i.message }));
}

/** A 400 `validation_failed` naming each offending field; the one way domain checks report bad input. */
export function validationFailed(errors: FieldError[]): ApiError {
  return new ApiError("validation_failed", validationDetail(errors), { errors });
}

/** A body over the limit; the connection closes after the answer, as the client may still be sending it. */
export function payloadTooLarge(): ApiError {
  return new ApiError("payload_too_large", "the request body exceeds the configured limit", {
    headers: { connection: "close" },
  });
}

/** Maps anything thrown in a request to a problem; unknown errors are logged with their stack and never shown. */
export function toApiError(err: FastifyError | Error): { apiError: ApiError; unexpected: boolean } {
  if (err instanceof ApiError) return { apiError: err, unexpected: false };
  if (err instanceof InvalidInputError)
    return {
      apiError: validationFailed(bodyFieldErrors(err.issues)),
      unexpected: false,
    };
  const fe = err as FastifyError & { validation?: AjvError[]; validationContext?: string };
  if (Array.isArray(fe.validation)) {
    return {
      apiError: validationFailed(fieldErrors(fe.validationContext, fe.validation)),
      unexpected: false,
    };
  }
  switch (fe.code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return { apiError: payloadTooLarge(), unexpected: false };
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return {
        apiError: new ApiError("malformed_request", "the body's length does not match its Content-Length"),
        unexpected: false,
      };
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return {
        apiError: new ApiError("unsupported_media_type", "request bodies must be application/json"),
        unexpected: false,
      };
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
      return {
        apiError: new ApiError(
          "malformed_body",
          "the body is empty but the content type is application/json",
        ),
        unexpected: false,
      };
    case "FST_ERR_CTP_INVALID_JSON_BODY":
      return { apiError: new ApiError("malformed_body", "the body is not valid JSON"), unexpected: false };
  }
  if (err instanceof SyntaxError && fe.statusCode === 400)
    return { apiError: new ApiError("malformed_body", "the body is not valid JSON"), unexpected: false };
  if (fe.statusCode === 404)
    return { apiError: new ApiError("not_found", "no such resource"), unexpected: false };
  if (typeof fe.statusCode === "number" && fe.statusCode >= 400 && fe.statusCode < 500)
    return {
      apiError: new ApiError("malformed_request", "the request could not be read"),
      unexpected: false,
    };
  return {
    apiError: new ApiError("internal_error", "the agent failed unexpectedly; see its log"),
    unexpected: true,
  };
}

/** Sends `err` as the problem body; the one place a problem reaches the wire for a parsed request. */
export function sendProblem(reply: FastifyReply, err: ApiError): FastifyReply {
  if (err.code === "unauthorized") void reply.header("www-authenticate", 'Bearer realm="hostkeeper"');
  for (const [name, value] of Object.entries(err.headers ?? {})) void reply.header(name, value);
  return reply.code(err.status).type("application/problem+json").send(problemBody(err));
}
