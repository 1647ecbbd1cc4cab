import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Logger } from "pino";
import { derivedScopes, type Grant, missingScopes } from "../access/scopes.js";
import type { Principal, TokenRegistry } from "../access/tokens.js";
import { connectionPrincipal } from "../connect/principal.js";
import { LOOPBACK } from "../util/cidrs.js";
import { ApiError, type ProblemCode, problemCodes } from "./errors.js";
import type { FailureLimiter } from "./rate-limit.js";

declare module "fastify" {
  interface FastifyContextConfig {
    /**
     * Answers without a token. Only liveness probes set it; every other route, an unknown path included,
     * requires a token, so a route added later is protected without anyone remembering to.
     */
    public?: boolean;
    /**
     * The scopes a token needs for the route, all of them; `[]`: any valid token; `["*"]`: only a token
     * holding every scope. A route under `/v1/proxy`, `/v1/system` or `/v1/operator` that declares none
     * gets `<area>:read` (GET, HEAD) or `<area>:write`; any other route without them fails the start.
     */
    scopes?: readonly Grant[];
  }
  interface FastifyRequest {
    /** The token the request authenticated with; undefined on public routes. */
    principal?: Principal;
  }
}

/** Checks an `Authorization` header value from an address; the problem to answer, or undefined. */
export type TokenCheck = (
  authorization: string | undefined,
  address: string | undefined,
) => ApiError | undefined;

/**
 * Authentication: a token of the registry, or 401; an address that keeps failing gets 429 with
 * `Retry-After` instead, until its budget refills. A remote address past its budget is refused before its
 * token is compared; a loopback one still gets in with a valid token, so someone guessing from a shared
 * loopback cannot lock the agent's own CLI out. Failures are logged with the address and the reason,
 * never with what was presented.
 */
export class AccessControl {
  constructor(
    readonly tokens: TokenRegistry,
    private readonly limiter: FailureLimiter,
    private readonly log: Logger,
  ) {}

  authenticate(
    authorization: string | undefined,
    address: string | undefined,
    what: { method?: string | undefined; url?: string | undefined } = {},
  ): Principal | ApiError {
    const remote = address ?? "unknown";
    const path = what.url?.split("?")[0];
    // A remote address that has spent its budget is refused before its token is compared, so guessing
    // from it runs at the refill rate. The loopback is not: a local user sending bad tokens must not lock
    // the root CLI out, and a local guesser meets secrets it cannot read (the token file is 0600).
    const exhausted = LOOPBACK.has(remote) ? undefined : this.limiter.exhausted(remote);
    if (exhausted !== undefined) {
      this.log.debug(
        { remote_address: remote, method: what.method, path },
        "authentication refused, rate-limited",
      );
      return tooManyFailures(remote, exhausted);
    }
    const principal = this.tokens.authenticate(authorization);
    if (principal) return principal;
    const reason = authorization
      ? "the bearer token is not valid"
      : "an Authorization: Bearer header is required";
    const retryAfter = this.limiter.fail(remote);
    const fields = { remote_address: remote, method: what.method, path, reason };
    if (retryAfter !== undefined) {
      this.log.debug({ ...fields, retry_after_seconds: retryAfter }, "failed authentication, rate-limited");
      return tooManyFailures(remote, retryAfter);
    }
    this.log.warn(fields, "failed authentication");
    return new ApiError("unauthorized", reason);
  }

  /** The check as the HTTP edge needs it (the Expect handler, framework errors). */
  readonly check: TokenCheck = (authorization, address) => {
    const r = this.authenticate(authorization, address);
    return r instanceof ApiError ? r : undefined;
  };
}

function tooManyFailures(remote: string, retryAfter: number): ApiError {
  return new ApiError(
    "too_many_failed_authentications",
    `too many failed authentications from ${remote}; try again in ${retryAfter} s`,
    { headers: { "retry-after": String(retryAfter) }, extensions: { retry_after_seconds: retryAfter } },
  );
}

/** The 403 for a principal missing `missing` of the route's scopes. */
export function insufficientScope(principal: Principal, missing: readonly Grant[]): ApiError {
  const list = missing.join(" ");
  return new ApiError(
    "insufficient_scope",
    `the token ${principal.name} lacks the scope ${missing.join(", ")} this route requires`,
    {
      extensions: { required_scopes: missing },
      headers: {
        "www-authenticate": `Bearer realm="hostkeeper", error="insufficient_scope", scope="${list}"`,
      },
    },
  );
}

/**
 * Gives every route its scopes as it is registered, before the route table and the OpenAPI document see
 * it: declared (`config.scopes`) or derived from its area and method. A non-public route with neither is
 * an error at start, so no route is ever served with "some token" by accident. The OpenAPI operation gets
 * its security requirement with those scopes, and the 403 and 429 answers every guarded route can give.
 * Register before any route is added.
 */
export function requireRouteScopes(app: FastifyInstance): void {
  app.addHook("onRoute", (route) => {
    if (route.config?.public === true) return;
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    const derived = new Set(methods.map((m) => derivedScopes(m, route.url)?.join(" ")));
    // One route for reads and writes alike must say which scopes it needs.
    const scopes =
      route.config?.scopes ?? (derived.size === 1 ? derivedScopes(methods[0] ?? "", route.url) : undefined);
    if (scopes === undefined)
      throw new Error(
        `route ${methods.join(",")} ${route.url} declares no token scopes: set config.scopes (or config.public for a probe)`,
      );
    route.config = { ...route.config, scopes };
    const schema = route.schema as { hide?: boolean; response?: Record<string, unknown> } | undefined;
    if (!schema || schema.hide) return;
    // A copy: a schema object shared by two routes must not carry one route's scopes into the other.
    route.schema = {
      ...schema,
      security: [{ bearer: [...scopes] }],
      ...(schema.response
        ? {
            response: withProblem(
              withProblem(schema.response, "insufficient_scope"),
              "too_many_failed_authentications",
            ),
          }
        : {}),
    };
  });
}

/** `response` with `code`'s status documented (beside any other problem of that status). */
function withProblem(response: Record<string, unknown>, code: ProblemCode): Record<string, unknown> {
  const { status, title } = problemCodes[code];
  const line = `\`${code}\`: ${title}`;
  const existing = response[status] as { description?: string } | undefined;
  if (existing?.description?.includes(line)) return response;
  return {
    ...response,
    [status]: {
      description: existing?.description ? `${existing.description}; ${line}` : line,
      content: { "application/problem+json": { schema: { $ref: "Problem" } } },
    },
  };
}

/**
 * The token and its scopes are decided on the route the router matched, never on the spelling of the URL:
 * `/%76%31/...`, `//v1/...` or `/v1/./...` reach the same route, or the not-found handler, and both run
 * this hook first. It is the first hook of the root scope after the request id and the Host check, so it
 * runs before body parsing, validation and every other hook. `afterAuthentication` runs between the token
 * and the scope check (the audit trail records a refused request too).
 */
export function registerAccessControl(
  app: FastifyInstance,
  access: AccessControl,
  afterAuthentication: (request: FastifyRequest, reply: FastifyReply) => Promise<void>,
): void {
  app.addHook("onRequest", async (request, reply) => {
    if (request.is404 !== true && request.routeOptions.config.public === true) return;
    // A request over the connection to the control plane acts with the connection's scopes (connect/principal.ts).
    const r =
      connectionPrincipal(request.raw) ??
      access.authenticate(request.headers.authorization, request.ip, {
        method: request.method,
        url: request.url,
      });
    if (r instanceof ApiError) throw r;
    request.principal = r;
    if (request.is404 === true) return;
    await afterAuthentication(request, reply);
    const missing = missingScopes(r.scopes, request.routeOptions.config.scopes ?? ["*"]);
    if (missing.length > 0) throw insufficientScope(r, missing);
  });
}
