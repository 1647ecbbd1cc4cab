import type { FastifyError, FastifyInstance } from "fastify";

/**
 * The closed set of problem codes the API answers with. Each has one status and one title; the code also
 * forms the problem `type` URI, so a client can branch on either.
 */
export const problemCodes = {
  validation_failed: { status: 400, title: "Request validation failed" },
  malformed_body: { status: 400, title: "Malformed request body" },
  unauthorized: { status: 401, title: "Missing or invalid bearer token" },
  operator_route_immutable: { status: 403, title: "Operator route is immutable" },
  not_found: { status: 404, title: "Not found" },
  route_not_found: { status: 404, title: "Route not found" },
  update_not_found: { status: 404, title: "Update process not found" },
  method_not_allowed: { status: 405, title: "Method not allowed" },
  route_exists: { status: 409, title: "Route already exists" },
  update_in_progress: { status: 409, title: "Update already in progress" },
  update_id_conflict: { status: 409, title: "Update process id already used with a different request" },
  payload_too_large: { status: 413, title: "Request body too large" },
  unsupported_media_type: { status: 415, title: "Unsupported media type" },
  internal_error: { status: 500, title: "Internal server error" },
  package_manager_busy: { status: 500, title: "Package manager busy" },
  package_manager_failed: { status: 500, title: "Package manager failed" },
  proxy_unavailable: { status: 503, title: "Proxy unavailable" },
  proxy_rejected_change: { status: 503, title: "Proxy rejected the change" },
  proxy_rollback_failed: { status: 503, title: "Proxy change failed and rollback failed" },
  running_instance_unavailable: { status: 503, title: "Running instance unavailable" },
  operator_not_configured: { status: 503, title: "Operator self-update is not configured" },
} as const satisfies Record<string, { status: number; title: string }>;

export type ProblemCode = keyof typeof problemCodes;

export const problemTypeUri = (code: ProblemCode) => `urn:hostkeeper:problem:${code}`;

export interface FieldError {
  /** JSON pointer-ish location, e.g. `body.upstreams[1].dial`. */
  field: string;
  message: string;
}

/** The one error class of the API. Domain code throws it (or a subclass); only the handler turns it into HTTP. */
export class ApiError extends Error {
  readonly code: ProblemCode;
  readonly status: number;
  readonly errors: FieldError[] | undefined;
  /** Extension members added to the problem body (RFC 9457 section 3.2). */
  readonly extensions: Record<string, unknown> | undefined;

  constructor(
    code: ProblemCode,
    detail: string,
    opts: { errors?: FieldError[]; extensions?: Record<string, unknown>; cause?: unknown } = {},
  ) {
    super(detail, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = "ApiError";
    this.code = code;
    this.status = problemCodes[code].status;
    this.errors = opts.errors;
    this.extensions = opts.extensions;
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
  keyword?: string;
  message?: string;
  params?: Record<string, unknown>;
}

function fieldErrors(context: string | undefined, validation: AjvError[]): FieldError[] {
  const base = context ?? "body";
  return validation.map((v) => {
    let path = (v.instancePath ?? "")
      .split("/")
      .filter((p) => p !== "")
      .map((p) => (/^\d+$/.test(p) ? `[${p}]` : `.${p.replace(/~1/g, "/").replace(/~0/g, "~")}`))
      .join("");
    let message = v.message ?? "is invalid";
    const params = v.params ?? {};
    if (v.keyword === "required" && typeof params.missingProperty === "string") {
      path += `.${params.missingProperty}`;
      message = "is required";
    } else if (v.keyword === "additionalProperties" && typeof params.additionalProperty === "string") {
      path += `.${params.additionalProperty}`;
      message = "is not a known field";
    } else if (v.keyword === "enum" && Array.isArray(params.allowedValues)) {
      message = `must be one of ${params.allowedValues.map((x) => JSON.stringify(x)).join(", ")}`;
    }
    return { field: `${base}${path}`, message };
  });
}

function describe(errors: FieldError[]): string {
  return errors.map((e) => `${e.field} ${e.message}`).join("; ");
}

/** Maps anything thrown in a request to a problem; unknown errors are logged with their stack and never shown. */
export function toApiError(err: FastifyError | Error): { apiError: ApiError; unexpected: boolean } {
  if (err instanceof ApiError) return { apiError: err, unexpected: false };
  const fe = err as FastifyError & { validation?: AjvError[]; validationContext?: string };
  if (Array.isArray(fe.validation)) {
    const errors = fieldErrors(fe.validationContext, fe.validation);
    return { apiError: new ApiError("validation_failed", describe(errors), { errors }), unexpected: false };
  }
  switch (fe.code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return {
        apiError: new ApiError("payload_too_large", "the request body exceeds the configured limit"),
        unexpected: false,
      };
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
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
    return { apiError: new ApiError("malformed_body", fe.message), unexpected: false };
  return {
    apiError: new ApiError("internal_error", "the agent failed unexpectedly; see its log"),
    unexpected: true,
  };
}

export function registerErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err, request, reply) => {
    const { apiError, unexpected } = toApiError(err as FastifyError);
    if (unexpected) request.log.error({ err }, "unexpected error");
    else if (apiError.status >= 500)
      request.log.warn({ code: apiError.code, detail: apiError.message }, "request failed");
    if (apiError.code === "unauthorized") void reply.header("www-authenticate", 'Bearer realm="hostkeeper"');
    return reply.code(apiError.status).type("application/problem+json").send(problemBody(apiError));
  });
  app.setNotFoundHandler((request, reply) => {
    const err = new ApiError("not_found", `no route for ${request.method} ${request.url.split("?")[0]}`);
    return reply.code(404).type("application/problem+json").send(problemBody(err));
  });
}
