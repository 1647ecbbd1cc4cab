import { isIP } from "node:net";
import { isGrant } from "../access/scopes.js";
import { ConfigError, parse, setting } from "../config.js";
import { LOOPBACK } from "../util/cidrs.js";
import { publicKeyFromBase64 } from "./protocol.js";

/** A control plane's URL: `wss://`, or `ws://` to a loopback address only (the tests', a local relay's). */
function connectUrl(raw: unknown): string | undefined {
  const s = parse.optionalString(raw);
  if (s === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(s);
  } catch {
    throw new Error(`expected a wss:// URL, got "${s}"`);
  }
  if (url.username || url.password) throw new Error("must not carry credentials");
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (url.protocol === "ws:" && !(isIP(host) && LOOPBACK.has(host)))
    throw new Error("ws:// is only for a loopback address; a control plane elsewhere needs wss://");
  if (url.protocol !== "wss:" && url.protocol !== "ws:") throw new Error(`expected a wss:// URL, got "${s}"`);
  return url.href;
}

/** The outbound connection to the control plane (docs/connect.md). Off while HOSTKEEPER_CONNECT_URL is unset. */
export const connectSettings = {
  url: setting({
    key: "connectUrl",
    env: "HOSTKEEPER_CONNECT_URL",
    area: "agent",
    doc: "The control plane's WebSocket URL the agent dials (`wss://`; `ws://` only to a loopback address), holding one connection open through which the control plane calls the agent's API (docs/connect.md). Needs `HOSTKEEPER_CONNECT_KEYS`.",
    defaultText: "none (no connection)",
    default: undefined as string | undefined,
    parse: connectUrl,
  }),
  keys: setting({
    key: "connectKeys",
    env: "HOSTKEEPER_CONNECT_KEYS",
    area: "agent",
    doc: "The control plane's Ed25519 public keys (base64 of 32 bytes; commas between several, or a list in the config file), pinned: the agent talks to no control plane that does not prove it holds one of them.",
    defaultText: "none",
    default: [] as string[],
    parse: (raw: unknown) =>
      parse.list(raw).map((k) => {
        publicKeyFromBase64(k);
        return k;
      }),
    show: (keys: string[]) => keys.join(", ") || "none",
  }),
  ca: setting({
    key: "connectCa",
    env: "HOSTKEEPER_CONNECT_CA",
    area: "agent",
    doc: "PEM file of the certificate authorities the control plane's TLS certificate is verified with, instead of the system's. Verification cannot be turned off.",
    defaultText: "the system's CAs",
    default: undefined as string | undefined,
    parse: parse.optionalString,
  }),
  enrollToken: setting({
    key: "enrollToken",
    env: "HOSTKEEPER_ENROLL_TOKEN",
    area: "agent",
    doc: "One-time token the control plane issued for this host, presented on the first connection only; once the control plane accepts it the agent records that it is enrolled and uses its key alone (the setting can then go).",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: parse.optionalString,
    secret: true,
  }),
  scopes: setting({
    key: "connectScopes",
    env: "HOSTKEEPER_CONNECT_SCOPES",
    area: "agent",
    doc: "What the control plane may do over the connection: token scopes' names (docs/security.md), commas between them; `*` for all.",
    defaultText: "*",
    default: ["*"] as string[],
    parse: (raw: unknown) => {
      const scopes = parse.list(raw);
      const bad = scopes.filter((s) => !isGrant(s));
      if (bad.length > 0) throw new Error(`unknown scopes: ${bad.join(", ")}`);
      if (scopes.length === 0) throw new Error("must name at least one scope");
      return scopes;
    },
    show: (scopes: string[]) => scopes.join(", "),
  }),
  heartbeatS: setting({
    key: "connectHeartbeatS",
    env: "HOSTKEEPER_CONNECT_HEARTBEAT_S",
    area: "agent",
    doc: "Seconds between the agent's pings on the connection; a control plane silent for three of them is taken for dead and dialled again. Keep it under the idle time-out of any proxy between the two.",
    defaultText: "15",
    default: 15,
    parse: parse.int(1, 60),
  }),
};

/**
 * A URL needs a pinned key: the agent talks to no control plane it cannot identify. An agent that listens on
 * nothing needs the connection: nobody could reach it.
 */
export function checkConnectPairs(c: { url: string | undefined; keys: string[] }, listen: unknown): void {
  if (listen === "off" && c.url === undefined)
    throw new ConfigError(
      "HOSTKEEPER_LISTEN",
      `is off, which needs ${connectSettings.url.env}: an agent listening on nothing without a connection could not be reached`,
    );
  if (c.url !== undefined && c.keys.length === 0)
    throw new ConfigError(
      connectSettings.url.env,
      `needs ${connectSettings.keys.env} too: the agent talks to no control plane it cannot identify`,
    );
}
