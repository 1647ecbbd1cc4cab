import type { AppConfig } from "../settings.js";
import { caddyDuration } from "./config.js";
import type { ConfigField } from "./config-fields.js";
import { type AgentField, ISSUER_KEYS, issuanceFields } from "./issuance.js";

/**
 * Every field the agent keeps in Caddy's config outside the routes, in the order they are written: the
 * issuance settings (the local CA's trust first) and the HTTP app's `grace_period` (none when 0: Caddy's
 * eternal default is left alone). Carried by the HTTP app and the managed server when the agent creates
 * them (server-creation.ts), in the embedded Caddy's first config (process/launch.ts), and brought in line
 * at start (proxy/conformance.ts) as `fieldsAtStart` chooses.
 */
export function agentCaddyFields(proxy: AppConfig["proxy"]): AgentField[] {
  const fields = issuanceFields(proxy, proxy.caddyServer);
  if (proxy.caddyGracePeriodMs <= 0) return fields;
  const grace = caddyDuration(proxy.caddyGracePeriodMs);
  return [
    ...fields,
    { path: ["apps", "http", "grace_period"], needs: 2, want: () => grace, askedBy: ["caddyGracePeriodMs"] },
  ];
}

/**
 * The fields the agent brings in line at its start. On its embedded Caddy, all of them. On a Caddy of the
 * user's own (`HOSTKEEPER_CADDY_ADMIN`), only those a setting set in the environment or the config file
 * asks for: the TLS app, the ports, the server's automatic HTTPS and `grace_period` stay as that Caddy's
 * owner set them until a setting says otherwise, so an upgrade of the agent changes none of them.
 */
export function fieldsAtStart(
  fields: readonly AgentField[],
  o: { ownCaddy: boolean; explicit: ReadonlySet<string> },
): ConfigField[] {
  return o.ownCaddy ? fields.filter((f) => f.askedBy.some((k) => o.explicit.has(k))) : [...fields];
}

/**
 * Whether the agent applies its issuer (the TLS app and the managed server's automatic HTTPS) to this
 * Caddy, by `fieldsAtStart`'s rule: always to its embedded Caddy, to a Caddy of the user's own only when an
 * issuance setting is set. The HTTPS redirect goes with it.
 */
export const issuerApplied = (o: { ownCaddy: boolean; explicit: ReadonlySet<string> }): boolean =>
  !o.ownCaddy || ISSUER_KEYS.some((k) => o.explicit.has(k));

/**
 * Which case `fieldsAtStart` applies, for the start log and `hostkeeper config check`: `applied` names the
 * settings (by their environment names) the agent writes into Caddy at start, null for all of them (its
 * embedded Caddy).
 */
export function settingsAtStart(
  fields: readonly AgentField[],
  o: { ownCaddy: boolean; explicit: ReadonlySet<string> },
  envOf: (key: string) => string,
): { applied: string[] | null; text: string } {
  if (!o.ownCaddy)
    return {
      applied: null,
      text: "the embedded Caddy gets every TLS, port and grace_period setting",
    };
  const asked = [...new Set(fields.flatMap((f) => f.askedBy.filter((k) => o.explicit.has(k))))].map(envOf);
  const rest = "its TLS app, ports, automatic HTTPS and grace_period";
  return {
    applied: asked,
    text:
      asked.length === 0
        ? `a Caddy of your own: ${rest} are left as its owner set them (no setting of them is set)`
        : `a Caddy of your own: the agent applies ${asked.join(", ")}; the rest of ${rest} is left as its owner set it`,
  };
}
