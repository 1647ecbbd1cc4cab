import { type SchemaOptions, type Static, type TSchema, type TString, Type } from "@sinclair/typebox";
import { type ProblemCode, problemCodes } from "./errors.js";

export const FieldErrorSchema = Type.Object(
  {
    field: Type.String({ description: "Where the problem is, e.g. `body.upstreams[0].dial`." }),
    message: Type.String(),
  },
  { additionalProperties: false },
);

/** RFC 9457 problem details, as every 4xx/5xx body of this API. Extension members are allowed. */
export const ProblemSchema = Type.Object(
  {
    type: Type.String({ description: "URI naming the problem: `urn:hostkeeper:problem:<code>`." }),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.String(),
    code: Type.String({ enum: Object.keys(problemCodes) }),
    errors: Type.Optional(Type.Array(FieldErrorSchema, { description: "Present on validation failures." })),
  },
  { additionalProperties: true, $id: "Problem", title: "Problem" },
);

/** A response of `schema` as `application/json`, for a route's `response` map. */
export function jsonContent(schema: unknown, description: string) {
  return { description, content: { "application/json": { schema } } };
}

/** Response schemas for the given problem codes, keyed by status (several codes may share one status). */
export function problemResponses(...codes: ProblemCode[]): Record<number, unknown> {
  const out: Record<number, unknown> = {};
  const byStatus = new Map<number, string[]>();
  for (const c of [...codes, "unauthorized", "internal_error"] as ProblemCode[]) {
    const { status, title } = problemCodes[c];
    byStatus.set(status, [...(byStatus.get(status) ?? []), `\`${c}\`: ${title}`]);
  }
  for (const [status, titles] of byStatus) {
    out[status] = {
      description: [...new Set(titles)].join("; "),
      content: { "application/problem+json": { schema: Type.Ref("Problem") } },
    };
  }
  return out;
}

/** A string limited to `values`, as a plain JSON Schema `enum` (clear validation messages, one OpenAPI enum). */
export function StringEnum<const V extends readonly string[]>(values: V, options: SchemaOptions = {}) {
  return Type.Unsafe<V[number]>({ ...options, type: "string", enum: [...values] });
}

/**
 * A string or null as one JSON Schema `type: ["string", "null"]` (OpenAPI 3.1) rather than an `anyOf`, so
 * a wrong value gets one message ("must be a string or null") instead of one per branch.
 */
export function NullableString(schema: TString) {
  return Type.Unsafe<string | null>({ ...schema, type: ["string", "null"] });
}

/**
 * A `$ref` to `schema` (registered with the app under its `$id`) that keeps the schema's static type, so
 * request types come from the schemas alone (`Static<typeof X>`) while the OpenAPI document names the shape.
 */
export function RefTo<T extends TSchema>(schema: T) {
  if (schema.$id === undefined) throw new Error("RefTo needs a schema with an $id");
  return Type.Unsafe<Static<T>>(Type.Ref(schema.$id));
}
