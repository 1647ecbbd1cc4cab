/**
 * The one write that creates the managed server holding `routes`: a POST of the server, or of the nearest
 * missing parent of `apps.http.servers.<server>` wrapping it, to what Caddy's `config` (read whole, null
 * when Caddy has none) already holds. Caddy's HTTP app, when it is created here, gets `httpApp`'s fields.
 */
export function managedServerCreation(
  config: Record<string, unknown> | null | undefined,
  o: { server: string; listen: readonly string[]; httpApp?: Record<string, unknown> },
  routes: unknown[],
): { path: string; value: unknown } {
  const chain = ["apps", "http", "servers", o.server];
  let value: unknown = { listen: [...o.listen], routes };
  let node: unknown = config;
  let depth = 0;
  while (depth < chain.length && node && typeof node === "object" && (chain[depth] as string) in node) {
    node = (node as Record<string, unknown>)[chain[depth] as string];
    depth++;
  }
  for (let i = chain.length - 1; i > depth; i--)
    value = { ...(chain[i - 1] === "http" ? o.httpApp : {}), [chain[i] as string]: value };
  if (config === null || config === undefined)
    return { path: "/config/", value: { [chain[0] as string]: value } };
  const parent = chain.slice(0, depth).join("/");
  return { path: `/config/${parent ? `${parent}/` : ""}${chain[depth]}`, value };
}
