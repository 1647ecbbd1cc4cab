import type { Logger } from "pino";
import { fs } from "../../util/node-builtins.js";
import { type CaddyConfig, setIn } from "../config.js";
import { type ConfigField, conformFields, nestFields } from "../config-fields.js";
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
 * config has none, its listen list set when an earlier configuration left another one. One change of its
 * listen list: an existing server's is all that is read (never the server, which holds every route); a
 * missing one is created by the write, holding no routes and the agent's fields that lie in what it creates
 * (the fields that can be written on their own are brought in line before it: the local CA's trust and the
 * issuer are in place before the server can serve a host).
 */
export async function prepareServer(config: CaddyConfig, server: ManagedServer, log: Logger): Promise<void> {
  const serverKeys = ["apps", "http", "servers", server.name];
  const fields = server.fields ?? [];
  try {
    const done = await config.update([...serverKeys, "listen"], () => [...server.listen], {
      createConfig: true,
      creating: async (at, value) => {
        if (at.length > serverKeys.length) return value;
        await conformFields(config, fields);
        const created = setIn(
          value as Record<string, unknown>,
          [...serverKeys.slice(at.length), "routes"],
          [],
        );
        return nestFields(fields, at, created);
      },
    });
    if (!done.written) return;
    if (done.created && done.created.length <= serverKeys.length)
      log.info({ server: server.name, listen: server.listen }, "created the managed server");
    else
      log.info(
        { server: server.name, from: done.before ?? null, to: server.listen },
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
