import { createConnection, createServer, isIP } from "node:net";
import { fs } from "../../util/node-builtins.js";
import { retriedAcrossReload } from "../retry.js";

const { readdirSync, readFileSync, readlinkSync } = fs;

/** One TCP address (one port) of a Caddy `listen` list. */
export interface TcpAddress {
  /** The entry of the listen list it comes from, as written there. */
  text: string;
  /** Empty for a wildcard (`:80`). */
  host: string;
  port: number;
  family: "any" | "ipv4" | "ipv6";
}

/** A port range wider than this is checked only at its first ports: a probe must stay cheap. */
const MAX_PORTS_PER_ENTRY = 32;

/**
 * The TCP addresses of Caddy listen entries: `host:port`, `:port`, `[::1]:port`, `tcp4/host:port`,
 * port ranges `host:8000-8010`. Entries of other networks (`unix/...`, `udp/...`, `fd/...`) are not TCP
 * ports and are left out.
 */
export function tcpAddresses(listen: readonly string[]): TcpAddress[] {
  const out: TcpAddress[] = [];
  for (const text of listen) {
    let rest = text.trim();
    let family: TcpAddress["family"] = "any";
    const slash = rest.indexOf("/");
    if (slash !== -1) {
      const network = rest.slice(0, slash).toLowerCase();
      if (network === "tcp4") family = "ipv4";
      else if (network === "tcp6") family = "ipv6";
      else if (network !== "tcp") continue;
      rest = rest.slice(slash + 1);
    }
    const colon = rest.lastIndexOf(":");
    if (colon === -1) continue;
    let host = rest.slice(0, colon);
    if (host.startsWith("[") && host.endsWith("]")) host = host.slice(1, -1);
    const [first, last = first] = rest
      .slice(colon + 1)
      .split("-")
      .map(Number);
    if (first === undefined || last === undefined || !Number.isInteger(first) || !Number.isInteger(last))
      continue;
    for (let port = first; port <= Math.min(last, first + MAX_PORTS_PER_ENTRY - 1); port++)
      if (port > 0 && port < 65536) out.push({ text, host, port, family });
  }
  return out;
}

/** A process holding a listening socket. */
export interface SocketHolder {
  pid: number;
  /** The process's command name (`/proc/<pid>/comm`). */
  name: string | undefined;
}

/**
 * Binds the address the way a plain server does (SO_REUSEADDR as Node sets it, and no SO_REUSEPORT), then
 * lets it go. Undefined when that worked; else the error (EADDRINUSE, EACCES, EADDRNOTAVAIL...).
 *
 * Why this detects a server that shares its port through SO_REUSEPORT: Linux lets a second socket bind a
 * listening address only when both sockets set SO_REUSEPORT (and belong to the same user). Caddy sets it, so
 * Caddy would bind beside such a server without a word and the kernel would split the connections between
 * them; our socket does not set it, so the kernel refuses it whoever holds the address and however.
 */
export function tryBind(a: TcpAddress): Promise<NodeJS.ErrnoException | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", (err: NodeJS.ErrnoException) => resolve(err));
    const host =
      a.host !== "" ? a.host : a.family === "ipv4" ? "0.0.0.0" : a.family === "ipv6" ? "::" : undefined;
    server.listen({ host, port: a.port, exclusive: true, ipv6Only: a.family === "ipv6" }, () =>
      server.close(() => resolve(undefined)),
    );
  });
}

/** `/proc/net/tcp*` addresses: little-endian 32-bit words of hex. */
function procAddress(hex: string): string {
  const words = hex.match(/.{8}/g) ?? [];
  const bytes = words.flatMap((w) => (w.match(/../g) ?? []).reverse().map((b) => Number.parseInt(b, 16)));
  if (bytes.length === 4) return bytes.join(".");
  if (bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff)
    return bytes.slice(12).join(".");
  if (bytes.every((b) => b === 0)) return "::";
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i] ?? 0) * 256 + (bytes[i + 1] ?? 0)).toString(16));
  return groups.join(":");
}

const WILDCARDS = new Set(["", "0.0.0.0", "::"]);

/** Whether a socket bound to `bound` takes connections meant for `wanted` (a host name matches any). */
function overlaps(bound: string, wanted: string): boolean {
  if (WILDCARDS.has(bound) || WILDCARDS.has(wanted) || isIP(wanted) === 0) return true;
  return bound === wanted;
}

/**
 * Inodes of the listening TCP sockets that take connections for `a`, from /proc/net/tcp and tcp6. Empty
 * where there is no /proc (not Linux).
 */
export function listeningInodes(a: TcpAddress): Set<string> {
  const inodes = new Set<string>();
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const cols = line.trim().split(/\s+/);
      const [local, state, inode] = [cols[1], cols[3], cols[9]];
      if (state !== "0A" || !local || !inode) continue; // 0A: LISTEN
      const [addr = "", portHex = ""] = local.split(":");
      if (Number.parseInt(portHex, 16) !== a.port) continue;
      if (overlaps(procAddress(addr), a.host)) inodes.add(inode);
    }
  }
  return inodes;
}

/** The socket inodes among a process's open files; empty when its fds cannot be read. */
export function socketInodesOf(pid: number): Set<string> {
  const out = new Set<string>();
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return out;
  }
  for (const fd of fds) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m?.[1]) out.add(m[1]);
    } catch {
      // closed meanwhile
    }
  }
  return out;
}

function commandName(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return undefined;
  }
}

/**
 * The processes holding listening sockets for `a`, found by matching the sockets' inodes against every
 * process's open files. Processes whose files this agent may not read (another user's, when not root) are
 * missed; `unattributed` counts the sockets no readable process holds.
 */
export function socketHolders(a: TcpAddress): { holders: SocketHolder[]; unattributed: number } {
  const inodes = listeningInodes(a);
  if (inodes.size === 0) return { holders: [], unattributed: 0 };
  const found = new Set<string>();
  const holders: SocketHolder[] = [];
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((d) => /^\d+$/.test(d));
  } catch {
    return { holders: [], unattributed: inodes.size };
  }
  for (const p of pids) {
    const pid = Number(p);
    const mine = [...socketInodesOf(pid)].filter((i) => inodes.has(i));
    if (mine.length === 0) continue;
    for (const i of mine) found.add(i);
    holders.push({ pid, name: commandName(pid) });
  }
  return { holders, unattributed: inodes.size - found.size };
}

export const describeHolders = (h: { holders: SocketHolder[]; unattributed: number }) =>
  [
    ...h.holders.map((x) => `pid ${x.pid}${x.name ? ` (${x.name})` : ""}`),
    ...(h.unattributed > 0 ? ["a process this agent may not inspect"] : []),
  ].join(", ") || "another process";

/**
 * Whether something accepts TCP connections on `a` within `timeoutMs`. A wildcard address is tried on
 * `wildcardHost`, by default this host's loopback. A connection reset or refused is tried again (see
 * `retriedAcrossReload`): a connection queued on a listener that Caddy hands over to a new config is reset.
 */
export async function accepts(
  a: TcpAddress,
  timeoutMs: number,
  wildcardHost?: string,
): Promise<{ ok: boolean; error?: string }> {
  const loopback = a.family === "ipv6" || a.host === "::" ? "::1" : "127.0.0.1";
  const host = !WILDCARDS.has(a.host) ? a.host : (wildcardHost ?? loopback);
  try {
    await retriedAcrossReload(4, () => connects(host, a.port, timeoutMs));
    return { ok: true };
  } catch (err) {
    return { ok: false, error: (err as NodeJS.ErrnoException).code ?? (err as Error).message };
  }
}

/** Opens a TCP connection and closes it at once; rejects with the connection's error or a time-out. */
function connects(host: string, port: number, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host, port });
    const done = (err?: Error) => {
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(() => done(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    socket.once("connect", () => done());
    socket.once("error", (err) => done(err));
  });
}
