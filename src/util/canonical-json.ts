/**
 * JSON with object keys sorted, so two values that differ only in key order (a route read back from Caddy
 * and the one written, a repeated request) give the same text.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(
          Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
        )
      : v,
  );
}

/** Whether two values are the same JSON but for key order (a route read back from Caddy and the one written). */
export const sameJson = (a: unknown, b: unknown): boolean => canonicalJson(a) === canonicalJson(b);
