import { type SchemaOptions, type Static, type TSchema, type TString, Type } from "@sinclair/typebox";

/*
 * Schema helpers that know nothing of HTTP, so an area's schema files can use them without importing
 * src/http/.
 */

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
 * TypeBox types `$id` as optional, so a schema without one is refused here, when the module loads.
 */
export function RefTo<T extends TSchema>(schema: T) {
  if (schema.$id === undefined) throw new Error("RefTo: the schema has no $id to refer to");
  return Type.Unsafe<Static<T>>(Type.Ref(schema.$id));
}
