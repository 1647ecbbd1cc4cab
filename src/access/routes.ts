import { Type } from "@sinclair/typebox";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import { NullableString, StringEnum } from "../util/typebox.js";
import { AUDIT_OUTCOMES, type AuditLog } from "./audit-store.js";
import type { TokenRegistry } from "./tokens.js";

const AuditRecordSchema = Type.Object(
  {
    id: Type.Integer(),
    at: Type.String({ format: "date-time", description: "When the request was authenticated." }),
    completed_at: NullableString(
      Type.String({ format: "date-time", description: "When its outcome was written; null while pending." }),
    ),
    token: Type.String({ description: "Name of the token it came with (`default`: the agent's own)." }),
    remote_address: Type.String(),
    request_id: Type.String({ description: "Its `x-request-id`." }),
    method: Type.String(),
    route: Type.String({ description: "The route pattern, e.g. `/v1/proxy/routes/:route_id`." }),
    path: Type.String({ description: "The concrete path, without the query." }),
    status: Type.Union([Type.Integer(), Type.Null()], {
      description: "The status answered; null when none was sent (pending, aborted, interrupted).",
    }),
    outcome: StringEnum(AUDIT_OUTCOMES, {
      description:
        "`pending` (not finished), `succeeded` (2xx), `refused` (4xx), `failed` (5xx), `aborted` (the connection closed before the answer; the change may still have happened), `interrupted` (the agent stopped before the request finished; marked at its next start).",
    }),
    summary: Type.Record(
      Type.String(),
      Type.Union([Type.String(), Type.Number(), Type.Boolean(), Type.Null()]),
      {
        description:
          "What was asked: `operation` (the operationId), the path parameters, and short fields of the body (`domain`, `update_type`, `version`...; a list as its length). Never secrets or whole bodies.",
      },
    ),
  },
  { additionalProperties: false, $id: "AuditRecord", title: "AuditRecord" },
);

const AuditQuerySchema = Type.Object(
  {
    since: Type.Optional(
      Type.String({ format: "date-time", description: "Only records at or after this time (RFC 3339)." }),
    ),
    limit: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 1000,
        description: "How many records to list, 1-1000; default 100.",
      }),
    ),
  },
  { additionalProperties: false },
);

const TokenNameParams = Type.Object(
  {
    name: Type.String({
      pattern: "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
      description: "The token's name in the tokens file, or `default` for the agent's own token.",
    }),
  },
  { additionalProperties: false },
);

const RotatedTokenSchema = Type.Object(
  {
    name: Type.String(),
    token: Type.String({ description: "The new secret. Shown only here, once: the agent keeps its hash." }),
    previous_valid_until: Type.String({
      format: "date-time",
      description:
        "Until when the old secret still authenticates (`HOSTKEEPER_TOKEN_ROTATION_OVERLAP_SECONDS`).",
    }),
  },
  { additionalProperties: false, title: "RotatedToken" },
);

/** The audit trail and token rotation: both need a token holding every scope (`*`). */
export function registerAccessRoutes(app: App, audit: AuditLog, tokens: TokenRegistry): void {
  app.addSchema(AuditRecordSchema);
  app.get(
    "/v1/audit",
    {
      config: { scopes: ["*"] },
      schema: {
        tags: ["agent"],
        operationId: "listAuditRecords",
        summary: "List the audit trail of mutating requests",
        description:
          "Every authenticated request with effects (any method but GET/HEAD), refused and failed ones included: who (token name, address, request id), what (method, route, path, a short summary), and its outcome. Oldest first from `since`, at most `limit`; page on with the last record's `at`. Records are kept `HOSTKEEPER_AUDIT_RETENTION_DAYS`.",
        querystring: AuditQuerySchema,
        response: {
          200: jsonContent(
            Type.Object({ records: Type.Array(Type.Ref("AuditRecord")) }, { additionalProperties: false }),
            "The records.",
          ),
          ...problemResponses("validation_failed"),
        },
      },
    },
    async (request) => {
      const { since, limit } = request.query;
      return {
        records: audit.list({ since: since ? new Date(since) : undefined, limit: limit ?? 100 }),
      };
    },
  );

  app.post(
    "/v1/tokens/:name/rotate",
    {
      config: { scopes: ["*"] },
      schema: {
        tags: ["agent"],
        operationId: "rotateToken",
        summary: "Issue a new secret for a token",
        description:
          "A new secret for the named token of `HOSTKEEPER_TOKENS_FILE`, or for the agent's own token (`default`, in `<data dir>/token`); the old secret stays valid for `HOSTKEEPER_TOKEN_ROTATION_OVERLAP_SECONDS`. A `HOSTKEEPER_TOKEN` set in the configuration cannot be rotated here (409). Request body: none.",
        params: TokenNameParams,
        response: {
          200: jsonContent(RotatedTokenSchema, "The new secret, shown this once."),
          ...problemResponses("token_not_found", "token_not_rotatable", "token_rotation_failed"),
        },
      },
    },
    async (request) => {
      const { name } = request.params;
      const { secret, previousValidUntil } = tokens.rotate(name);
      request.log.info({ token: name }, "token rotated");
      return { name, token: secret, previous_valid_until: previousValidUntil };
    },
  );
}
