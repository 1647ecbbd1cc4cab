import { setIn } from "./config.js";
import { type ConfigField, nestFields } from "./config-fields.js";

/**
 * The one write that creates the managed server holding `routes`: a POST of the server, or of the nearest
 * missing parent of `apps.http.servers.<server>` wrapping it, to what Caddy's `config` (read whole, null
 * when Caddy has none) already holds. Whatever it creates carries the agent's `fields` that lie in it (the
 * HTTP app its ports and `grace_period`, the server its automatic HTTPS, a new `apps` the TLS issuer and
 * the local CA's trust), so Caddy never runs it without them.
 */
export function managedServerCreation(
  config: Record<string, unknown> | null | undefined,
  o: { server: string; listen: readonly string[]; fields?: readonly ConfigField[] },
  routes: unknown[],
): { path: string; value: unknown } {
  const chain = ["apps", "http", "servers", o.server];
  const server = { listen: [...o.listen], routes };
  const fields = o.fields ?? [];
  if (config === null || config === undefined)
    return { path: "/config/", value: nestFields(fields, [], setIn({}, chain, server)) };
  let node: unknown = config;
  let depth = 0;
  while (depth < chain.length && node && typeof node === "object" && (chain[depth] as string) in node) {
    node = (node as Record<string, unknown>)[chain[depth] as string];
    depth++;
  }
  const at = chain.slice(0, depth + 1);
  const below = chain.slice(depth + 1);
  const value = nestFields(fields, at, below.length === 0 ? server : setIn({}, below, server));
  return { path: `/config/${at.join("/")}`, value };
}
