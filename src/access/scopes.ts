/**
 * What a token may do. An area's routes need `<area>:read` (GET, HEAD) or `<area>:write` (anything else);
 * `*` holds every scope, and a route may require `*` itself (the audit trail, token rotation).
 */
export const SCOPES = [
  "proxy:read",
  "proxy:write",
  "system:read",
  "system:write",
  "operator:read",
  "operator:write",
  "agent:read",
  "agent:write",
] as const;
export type Scope = (typeof SCOPES)[number];
/** A scope a token holds or a route requires. */
export type Grant = Scope | "*";
export const GRANTS: readonly Grant[] = [...SCOPES, "*"];

export const isGrant = (s: unknown): s is Grant => typeof s === "string" && (GRANTS as string[]).includes(s);

/** The areas whose routes get their scope from the path and the method. */
const AREA = /^\/v1\/(proxy|system|operator|agent)(?:\/|$)/;

/**
 * The scope of a route that declares none: `/v1/<area>/...` needs `<area>:read` to read and `<area>:write`
 * for anything else. Undefined outside the areas: such a route must declare its scopes.
 */
export function derivedScopes(method: string, url: string): Grant[] | undefined {
  const area = AREA.exec(url)?.[1];
  if (area === undefined) return undefined;
  const read = method === "GET" || method === "HEAD";
  return [`${area}:${read ? "read" : "write"}` as Scope];
}

/** The scopes of `required` a holder of `held` lacks; `*` held covers everything. */
export function missingScopes(held: ReadonlySet<Grant>, required: readonly Grant[]): Grant[] {
  if (held.has("*")) return [];
  return required.filter((s) => !held.has(s));
}
