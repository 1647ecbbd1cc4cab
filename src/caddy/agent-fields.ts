import type { AppConfig } from "../settings.js";
import { caddyDuration } from "./config.js";
import type { ConfigField } from "./config-fields.js";
import { issuanceFields } from "./issuance.js";

/**
 * Every field the agent keeps in Caddy's config outside the routes, in the order they are written: the
 * issuance settings (the local CA's trust first) and the HTTP app's `grace_period` (none when 0: Caddy's
 * eternal default is left alone). Brought in line at start (proxy/conformance.ts), carried by the HTTP app
 * and the managed server when the agent creates them (server-creation.ts), and in the embedded Caddy's
 * first config (process/launch.ts).
 */
export function agentCaddyFields(proxy: AppConfig["proxy"]): ConfigField[] {
  const fields = issuanceFields(proxy, proxy.caddyServer);
  if (proxy.caddyGracePeriodMs <= 0) return fields;
  const grace = caddyDuration(proxy.caddyGracePeriodMs);
  return [...fields, { path: ["apps", "http", "grace_period"], needs: 2, want: () => grace }];
}
