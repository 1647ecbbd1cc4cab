import type { Logger } from "pino";
import { CaddyRoutes } from "../proxy/caddy-routes.js";
import { fs } from "../util/node-builtins.js";
import type { CaddyAdmin } from "./admin.js";
import type { ConfigField } from "./config-fields.js";
import { EmbeddedCaddyError } from "./errors.js";

const { readFileSync } = fs;

/** The server the agent manages routes on, under `apps.http.servers`, and where it listens. */
export interface ManagedServer {
  name: string;
  /** HOSTKEEPER_CADDY_LISTEN. */
  listen: readonly string[];
  /** The fields the agent keeps outside the routes, which the server carries when it is created. */
  fields?: readonly ConfigField[];
}

/**
 * The managed server exists, listening on HOSTKEEPER_CADDY_LISTEN: created (without routes) when Caddy's
 * config has none, its listen list set when an earlier configuration left another one.
 */
export async function prepareServer(admin: CaddyAdmin, server: ManagedServer, log: Logger): Promise<void> {
  const routes = new CaddyRoutes(admin, {
    server: server.name,
    listen: server.listen,
    ...(server.fields ? { fields: server.fields } : {}),
  });
  try {
    if (await routes.ensureServer()) {
      log.info({ server: server.name, listen: server.listen }, "created the managed server");
      return;
    }
    const path = `/config/apps/http/servers/${server.name}/listen`;
    const now = await admin.read(path);
    const current = now.status === 200 ? (JSON.parse(now.text) as string[] | null) : null;
    if (JSON.stringify(current) === JSON.stringify(server.listen)) return;
    await admin.write(current === null ? "PUT" : "PATCH", path, server.listen);
    log.info(
      { server: server.name, from: current, to: server.listen },
      "changed the managed server's listen addresses",
    );
  } catch (err) {
    throw new EmbeddedCaddyError(
      `the embedded Caddy refused the managed server ${server.name} on ${server.listen.join(", ")} (HOSTKEEPER_CADDY_LISTEN): ${(err as Error).message}`,
    );
  }
}

/**
 * What a Caddy started now will bind: HOSTKEEPER_CADDY_LISTEN, and the listen list of the managed server in
 * the autosaved config that `--resume` loads (until `prepareServer` sets it to the former).
 */
export function addressesToBind(autosave: string, server: ManagedServer): string[] {
  let saved: unknown;
  try {
    const config = JSON.parse(readFileSync(autosave, "utf8")) as {
      apps?: { http?: { servers?: Record<string, { listen?: unknown }> } };
    } | null;
    saved = config?.apps?.http?.servers?.[server.name]?.listen;
  } catch {
    // No autosaved config yet, or none that parses: only HOSTKEEPER_CADDY_LISTEN.
    saved = undefined;
  }
  const fromSave = Array.isArray(saved) ? saved.filter((s): s is string => typeof s === "string") : [];
  return [...new Set([...server.listen, ...fromSave])];
}
