import type { Logger } from "pino";
import type { CaddyAdmin } from "../caddy/admin.js";
import { CaddyConfig, type ConfigKeys } from "../caddy/config.js";
import type { Issuance } from "../caddy/issuance.js";
import { bringOnDemandInLine, wildcardHosts } from "../caddy/on-demand.js";
import type { Op, RouteJson } from "../caddy/routes/plan.js";
import type { BatchHooks } from "../proxy/writer.js";
import type { OnDemandHosts } from "./on-demand-store.js";

export interface OnDemandKeeperOptions {
  admin: CaddyAdmin;
  server: string;
  issuance: Issuance;
  /** Whether wildcard routes get on-demand issuance: the agent applies an issuer other than `off`. */
  enabled: boolean;
  /** The permission endpoint's URL, once its listener is up (on-demand-ask.ts). */
  endpoint: () => Promise<string>;
  hosts: OnDemandHosts;
  log: Logger;
}

/**
 * Keeps Caddy's on-demand policy in line with the routes' wildcard hosts, as the writer's hooks (beside
 * the access logs'). Before a batch that writes a wildcard route, its hosts join the policy (and the
 * permission endpoint is set), so its first handshakes already get certificates; once no change is queued
 * after a batch that removed or replaced one, the policy is made exactly the routes' again and the allowed
 * hosts of deleted routes are forgotten. Routes without wildcards cost nothing. Disabled (no issuer, or a
 * Caddy of the user's own without an issuance setting), it only takes away a policy of its own left from
 * before, at start.
 */
export class OnDemandKeeper implements BatchHooks {
  private readonly config: CaddyConfig;
  private readonly routes: ConfigKeys;

  constructor(private readonly o: OnDemandKeeperOptions) {
    this.config = new CaddyConfig(o.admin);
    this.routes = ["apps", "http", "servers", o.server, "routes"];
  }

  needs(op: Op): boolean {
    return this.o.enabled && op.kind !== "delete" && wildcardHosts(op.route).length > 0;
  }

  async before(ops: readonly Op[]): Promise<boolean> {
    const subjects = ops.flatMap((op) => (op.kind === "delete" ? [] : wildcardHosts(op.route)));
    if (subjects.length === 0) return false;
    const endpoint = await this.o.endpoint();
    // A host added for a change that then did not apply is taken away by the follow-up.
    return bringOnDemandInLine(this.config, this.o.issuance, { subjects, endpoint }, "add");
  }

  after(changes: readonly { op: Op; previous: RouteJson | null }[]): boolean {
    return this.o.enabled && changes.some((c) => wildcardHosts(c.previous).length > 0);
  }

  async idle(): Promise<void> {
    const text = (await this.config.text(this.routes)) ?? "[]";
    // Only a route with a wildcard host has `"*.` in Caddy's text of it: the others are not parsed.
    const routes = text.includes('"*.') ? ((JSON.parse(text) as RouteJson[] | null) ?? []) : [];
    const wild = routes.filter((r) => wildcardHosts(r).length > 0);
    const subjects = this.o.enabled ? [...new Set(wild.flatMap(wildcardHosts))] : [];
    const endpoint = subjects.length > 0 ? await this.o.endpoint() : undefined;
    const wrote = await bringOnDemandInLine(this.config, this.o.issuance, { subjects, endpoint }, "exact");
    const forgotten = this.o.hosts.keepOnly(new Set(wild.map((r) => String(r["@id"]))));
    if (wrote || forgotten > 0)
      this.o.log.info(
        { wildcard_hosts: subjects.length, policy_changed: wrote, routes_forgotten: forgotten },
        "brought Caddy's on-demand issuance in line with the wildcard routes",
      );
  }
}
