import type { Grant } from "../access/scopes.js";
import type { Principal } from "../access/tokens.js";

/**
 * Requests that came over the connection to the control plane reach the agent's HTTP handling through
 * sockets in memory (connect/http-bridge.ts) that only the connection's dispatcher makes and marks here;
 * the HTTP edge (http/auth.ts) takes their principal from the mark instead of a token. A request on a port
 * comes through a socket of Node's, never marked, so no header or spelling of a request can act as the
 * control plane: its scopes are reachable only through the connection.
 */
const marked = new WeakMap<object, Principal>();

/** The principal of one connection: its requests act as the control plane with `scopes`. */
export function connectionPrincipalOf(fingerprint: string, scopes: readonly Grant[]): Principal {
  return { name: `control-plane ${fingerprint}`, scopes: new Set(scopes) };
}

/** Marks a socket in memory as the connection's, before any request comes through it. */
export function markConnectionSocket(socket: object, principal: Principal): void {
  marked.set(socket, principal);
}

/** The principal of a request that came over the connection; undefined for every other request. */
export function connectionPrincipal(raw: { socket?: unknown }): Principal | undefined {
  const socket = raw.socket;
  return typeof socket === "object" && socket !== null ? marked.get(socket) : undefined;
}
