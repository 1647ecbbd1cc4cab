import { hostPort } from "../../util/urls.js";
import { EmbeddedCaddyError } from "./errors.js";
import {
  describeHolders,
  listeningInodes,
  socketHolders,
  socketInodesOf,
  tcpAddresses,
  tryBind,
} from "./listen-addresses.js";

/*
 * No other process may hold the managed server's listen addresses: Caddy sets SO_REUSEPORT, so beside a
 * server that does too it binds without an error and the kernel splits the connections between them. Two
 * checks: before Caddy binds, a bind of our own; with Caddy bound (an adopted one, or a race), the owners of
 * the listening sockets.
 */

const heldAdvice =
  "Caddy would fail to bind it, or, beside a server using SO_REUSEPORT, share its connections with that server without a word";

/** Before Caddy binds: every address must be free (a bind without SO_REUSEPORT succeeds). */
export async function refuseHeldAddresses(listen: readonly string[]): Promise<void> {
  const problems: string[] = [];
  for (const a of tcpAddresses(listen)) {
    const err = await tryBind(a);
    if (!err) continue;
    if (err.code === "EADDRINUSE")
      problems.push(`${hostPort(a)} is already in use by ${describeHolders(socketHolders(a))}`);
    else if (err.code === "EACCES")
      problems.push(
        `${hostPort(a)} cannot be bound: permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)`,
      );
    else problems.push(`${hostPort(a)} cannot be bound: ${err.code ?? err.message}`);
  }
  if (problems.length > 0)
    throw new EmbeddedCaddyError(
      `Caddy listen address (HOSTKEEPER_CADDY_LISTEN): ${problems.join("; ")}. ${heldAdvice}. Stop that process or choose another address.`,
    );
}

/**
 * With Caddy (`caddyPid`) running on the addresses: no listening socket for them may belong to another
 * process. This is what finds a server sharing an address with an adopted Caddy through SO_REUSEPORT, which
 * no bind attempt can (Caddy holds the address itself). Linux only: elsewhere there is no /proc to read.
 */
export function refuseForeignListeners(caddyPid: number | undefined, listen: readonly string[]): void {
  if (caddyPid === undefined) return;
  const own = socketInodesOf(caddyPid);
  const problems: string[] = [];
  for (const a of tcpAddresses(listen)) {
    const foreign = [...listeningInodes(a)].filter((i) => !own.has(i));
    if (foreign.length === 0) continue;
    const { holders, unattributed } = socketHolders(a);
    const others = { holders: holders.filter((h) => h.pid !== caddyPid), unattributed };
    problems.push(`${hostPort(a)} is also held by ${describeHolders(others)}`);
  }
  if (problems.length > 0)
    throw new EmbeddedCaddyError(
      `Caddy listen address (HOSTKEEPER_CADDY_LISTEN): ${problems.join("; ")}, sharing it with the embedded Caddy (pid ${caddyPid}) through SO_REUSEPORT, so the kernel splits the connections between them. Stop that process or choose another address.`,
    );
}
