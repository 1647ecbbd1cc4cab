import { SerializerSelector } from "@fastify/fast-json-stringify-compiler";
import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import Fastify, { type FastifyBaseLogger, type FastifyServerFactory } from "fastify";
import type { Logger } from "pino";
import type { AccessControl } from "../http/auth.js";
import { httpEdgeOptions, MAX_PARAM_LENGTH, queryIntegers } from "../http/edge.js";
import { genReqId } from "../http/request-id.js";
import type { App } from "../http/types.js";
import type { AppConfig } from "../settings.js";

const buildSerializer = SerializerSelector();

/**
 * Response serializers are compiled on first use rather than at start: every route declares a body for
 * each of its problem statuses, and compiling all of them up front costs megabytes of resident memory an
 * idle agent never uses. Request validators stay eager, so a broken request schema still fails the start.
 */
const lazySerializers: typeof buildSerializer = (externalSchemas, options) => {
  const compile = buildSerializer(externalSchemas, options);
  return (route) => {
    let serialize: ((data: unknown) => string) | undefined;
    return (data: unknown) => {
      serialize ??= compile(route);
      return serialize(data);
    };
  };
};

/** The Fastify instance the agent serves with: its limits, time-outs, ids, validation and serializers. */
export function createFastify(
  agent: AppConfig["agent"],
  check: AccessControl["check"],
  logger: Logger,
  serverFactory: FastifyServerFactory | undefined,
): App {
  const app = Fastify({
    ...httpEdgeOptions(check),
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    // Node would answer a missing Host itself, in plain text; the edge's hook answers it as a problem.
    http: { requireHostHeader: false },
    ...(serverFactory ? { serverFactory } : {}),
    loggerInstance: logger as FastifyBaseLogger,
    genReqId,
    bodyLimit: agent.bodyLimit,
    requestTimeout: agent.requestTimeoutMs,
    return503OnClosing: true,
    schemaController: { compilersFactory: { buildSerializer: lazySerializers } },
    ajv: {
      customOptions: { removeAdditional: false, coerceTypes: false, allErrors: true, useDefaults: false },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();
  queryIntegers(app);
  return app;
}
