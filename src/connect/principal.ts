import type { Grant } from "../access/scopes.js";
import type { Principal } from "../access/tokens.js";
import { http, type IncomingMessage } from "../util/node-builtins.js";

/**
 * Requests that came over the connection to the control plane are built (connect/dispatch.ts) as
 * instances of a class only this module can make; the HTTP edge (http/auth.ts) takes their principal from
 * it instead of a token. A request from a socket is an IncomingMessage of Node's own, never one of these,
 * so no header or spelling of a request can make one: the control plane's scopes are reachable only
 * through the connection.
 */
abstract class ConnectionRequest extends http.IncomingMessage {
  abstract readonly connectionPrincipal: Principal;
}

/** The request class of one connection: its requests act as the control plane with `scopes`. */
export function connectionRequestClass(
  fingerprint: string,
  scopes: readonly Grant[],
): typeof IncomingMessage {
  const principal: Principal = { name: `control-plane ${fingerprint}`, scopes: new Set(scopes) };
  class OneConnection extends ConnectionRequest {
    override get connectionPrincipal() {
      return principal;
    }
  }
  return OneConnection as unknown as typeof IncomingMessage;
}

/** The principal of a request that came over the connection; undefined for every other request. */
export function connectionPrincipal(raw: unknown): Principal | undefined {
  return raw instanceof ConnectionRequest ? raw.connectionPrincipal : undefined;
}
