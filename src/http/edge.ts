import type { Socket } from "node:net";
import type {
  FastifyError,
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  FastifyServerOptions,
} from "fastify";
import FindMyWay from "find-my-way";
import type { Grant } from "../access/scopes.js";
import type { IncomingMessage, ServerResponse } from "../util/node-builtins.js";
import { http } from "../util/node-builtins.js";
import type { TokenCheck } from "./auth.js";
import { ApiError, type ProblemCode, problemBody, sendProblem, toApiError } from "./errors.js";
import { genReqId, REQUEST_ID_HEADER } from "./request-id.js";

const { STATUS_CODES } = http;

/**
 * Route parameters may be as long as a request line can be (Node caps the whole head at 16 KiB), so a
 * long id reaches its route and its schema answers, never the router's 414.
 */
export const MAX_PARAM_LENGTH = 16 * 1024;

export interface RegisteredRoute {
  method: string;
  url: string;
  public: boolean;
  /** The scopes a token needs (none for a public route). */
  scopes: readonly Grant[];
}

/**
 * Every route the app registered, matched the way Fastify's router matches them (same library, same
 * options), so the not-found handler can tell a wrong method on a known path (405 with `Allow`) from an
 * unknown path (404), and tests can walk what is really served rather than a list kept by hand.
 */
export class RouteTable {
  private readonly router = FindMyWay({ maxParamLength: MAX_PARAM_LENGTH });
  private readonly list: RegisteredRoute[] = [];
  private readonly methods = new Set<string>();

  add(method: string | string[], url: string, isPublic: boolean, scopes: readonly Grant[] = []): void {
    for (const m of Array.isArray(method) ? method : [method]) {
      if (this.list.some((r) => r.method === m && r.url === url)) continue;
      this.list.push({ method: m, url, public: isPublic, scopes });
      this.methods.add(m);
      this.router.on(m as FindMyWay.HTTPMethod, url, () => undefined);
    }
  }

  routes(): readonly RegisteredRoute[] {
    return this.list;
  }

  /** The methods some route answers for this URL (its path decoded as the router decodes it). */
  allowed(url: string): string[] {
    return [...this.methods].filter((m) => this.router.find(m as FindMyWay.HTTPMethod, url) !== null).sort();
  }
}

/** Collects the app's routes into `table`; register before any route is added. */
export function trackRoutes(app: FastifyInstance, table: RouteTable): void {
  app.addHook("onRoute", (route) => {
    table.add(route.method, route.url, route.config?.public === true, route.config?.scopes);
  });
}

/** An area's own errors as problems (e.g. the system area's command failures); undefined for others. */
export type ProblemMapper = (err: unknown) => ApiError | undefined;

/**
 * Every answer the API sends is problem+json from here: errors thrown in a request, unknown paths (404),
 * known paths with the wrong method (405 with `Allow`). The token hook runs before the not-found handler,
 * so without a token an unknown path is 401 like any other.
 */
export function registerProblemHandlers(
  app: FastifyInstance,
  table: RouteTable,
  areaProblems: readonly ProblemMapper[],
): void {
  // RFC 9112 3.2: an HTTP/1.1 request without Host is refused; a framing error, so before the token.
  app.addHook("onRequest", async (request) => {
    if (request.raw.httpVersion === "1.1" && request.headers.host === undefined)
      throw new ApiError("malformed_request", "an HTTP/1.1 request needs a Host header");
  });
  app.setErrorHandler((err, request, reply) => {
    const mapped = areaProblems.map((toProblem) => toProblem(err)).find((p) => p !== undefined);
    const { apiError, unexpected } = mapped
      ? { apiError: mapped, unexpected: false }
      : toApiError(err as FastifyError);
    if (unexpected) request.log.error({ err }, "unexpected error");
    else if (apiError.status >= 500)
      request.log.warn(
        { code: apiError.code, detail: apiError.message, cause: apiError.cause },
        "request failed",
      );
    return sendProblem(reply, apiError);
  });
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split("?")[0];
    const allow = table.allowed(request.url);
    if (allow.length > 0) {
      void reply.header("allow", allow.join(", "));
      return sendProblem(
        reply,
        new ApiError("method_not_allowed", `${path} answers ${allow.join(", ")}, not ${request.method}`),
      );
    }
    return sendProblem(reply, new ApiError("not_found", `no route for ${request.method} ${path}`));
  });
}

/**
 * Node answers an `Expect` other than `100-continue` itself, with a bare 417, before Fastify sees the
 * request; here it is a problem, after the token like every other answer.
 */
export function answerExpectations(app: FastifyInstance, check: TokenCheck): void {
  app.server.on("checkExpectation", (req: IncomingMessage, res: ServerResponse) => {
    const problem =
      check(req.headers.authorization, req.socket.remoteAddress) ??
      new ApiError("expectation_failed", "only Expect: 100-continue is supported");
    const body = JSON.stringify(problemBody(problem));
    res.writeHead(problem.status, {
      "content-type": "application/problem+json",
      "content-length": Buffer.byteLength(body),
      connection: "close",
      [REQUEST_ID_HEADER]: genReqId(req),
      ...(problem.code === "unauthorized" ? { "www-authenticate": 'Bearer realm="hostkeeper"' } : {}),
      ...problem.headers,
    });
    res.end(body);
  });
}

/**
 * Fastify's answers for requests that never reach a route (a malformed percent escape in the path, a
 * parameter over the router's limit) and for bytes Node's HTTP parser cannot read. Both default to plain
 * JSON of Fastify's own shape and skip every hook; here they are problems, and a request that has a head
 * to read still has its token checked first, so without one a client learns nothing beyond 401.
 */
export function httpEdgeOptions(
  check: TokenCheck,
): Pick<FastifyServerOptions, "frameworkErrors" | "clientErrorHandler"> {
  return {
    frameworkErrors: (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
      // No hook runs for these requests, so the id is echoed here.
      void reply.header(REQUEST_ID_HEADER, request.id);
      const refused = check(request.headers.authorization, request.ip);
      if (refused) return sendProblem(reply, refused);
      const detail =
        error.code === "FST_ERR_BAD_URL"
          ? "the path holds a malformed percent escape"
          : "the path cannot be matched to a route";
      return sendProblem(reply, new ApiError("malformed_request", detail));
    },
    clientErrorHandler(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Socket) {
      // A reset socket has nobody to answer; a response already under way cannot be replaced.
      const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
      if (err.code === "ECONNRESET" || socket.destroyed || !socket.writable || inFlight?.headersSent) {
        socket.destroy();
        return;
      }
      const code: ProblemCode =
        err.code === "ERR_HTTP_REQUEST_TIMEOUT"
          ? "request_timeout"
          : err.code === "HPE_HEADER_OVERFLOW"
            ? "request_header_fields_too_large"
            : "malformed_request";
      // What the parser objected to stays in the log: the client may not even have sent a token.
      this.log.debug({ err: { code: err.code, message: err.message } }, "unreadable HTTP request");
      const problem = new ApiError(code, "the request could not be read as HTTP/1.1");
      const body = JSON.stringify(problemBody(problem));
      socket.end(
        `HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status]}\r\n` +
          "Content-Type: application/problem+json\r\n" +
          `Content-Length: ${Buffer.byteLength(body)}\r\n` +
          "Connection: close\r\n\r\n" +
          body,
      );
    },
  };
}

/** An integer written the one way a query may write it: no sign but `-`, no leading zero, no exponent. */
const QUERY_INTEGER = /^-?(?:0|[1-9][0-9]*)$/;

/**
 * Query parameters the schema types as integers reach its validation as numbers, when written as one
 * (`?limit=20`); anything else (`?limit=1e2`, `?limit=020`, a repeated key) stays as sent and fails as
 * `must be an integer`. The validator does not coerce (bodies keep their JSON types), so this is the one
 * place a query's text becomes a number; only routes with such a parameter get the hook.
 */
export function queryIntegers(app: FastifyInstance): void {
  app.addHook("onRoute", (route) => {
    const schema = route.schema?.querystring as
      | { properties?: Record<string, { type?: unknown }> }
      | undefined;
    const fields = Object.entries(schema?.properties ?? {})
      .filter(([, s]) => s.type === "integer")
      .map(([name]) => name);
    if (fields.length === 0) return;
    const hooks = route.preValidation;
    const toNumbers = (request: FastifyRequest, _reply: FastifyReply, done: () => void) => {
      const query = request.query as Record<string, unknown>;
      for (const name of fields) {
        const v = query[name];
        if (typeof v === "string" && QUERY_INTEGER.test(v)) query[name] = Number(v);
      }
      done();
    };
    route.preValidation = [...(hooks === undefined ? [] : Array.isArray(hooks) ? hooks : [hooks]), toNumbers];
  });
}
