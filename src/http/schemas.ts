import { Type } from "@sinclair/typebox";
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
