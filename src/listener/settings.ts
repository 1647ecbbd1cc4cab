import { ConfigError, parse, setting } from "../config.js";
import { parseCidrs } from "../util/cidrs.js";

const path = (raw: unknown) => {
  const s = parse.optionalString(raw);
  if (s !== undefined && !s.startsWith("/")) throw new Error(`must be an absolute path, got "${s}"`);
  return s;
};

/**
 * Who may connect to the agent's API and how: TLS on its listener, client certificates, address ranges,
 * and the CLI's side of the same (it reads this configuration to reach the local agent).
 */
export const listenerSettings = {
  tlsCert: setting({
    key: "tlsCert",
    env: "HOSTKEEPER_TLS_CERT",
    area: "agent",
    doc: "PEM certificate (chain) for HTTPS on the agent's listener, with `HOSTKEEPER_TLS_KEY`. Both files are read again when they change (watched, and checked every `HOSTKEEPER_TLS_RELOAD_INTERVAL_MS`); a new pair that does not load is logged and the old one kept.",
    defaultText: "none (plain HTTP)",
    default: undefined as string | undefined,
    parse: path,
  }),
  tlsKey: setting({
    key: "tlsKey",
    env: "HOSTKEEPER_TLS_KEY",
    area: "agent",
    doc: "PEM private key of `HOSTKEEPER_TLS_CERT` (unencrypted; keep it 0600).",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: path,
  }),
  tlsClientCa: setting({
    key: "tlsClientCa",
    env: "HOSTKEEPER_TLS_CLIENT_CA",
    area: "agent",
    doc: "PEM file of the CA(s) whose client certificates may connect (needs TLS). A client without a valid certificate issued by them fails the TLS handshake, before any HTTP; the bearer token is still required on top.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: path,
  }),
  tlsReloadIntervalMs: setting({
    key: "tlsReloadIntervalMs",
    env: "HOSTKEEPER_TLS_RELOAD_INTERVAL_MS",
    area: "agent",
    doc: "How often the TLS files are checked for changes, besides watching their folders.",
    defaultText: "30000",
    default: 30_000,
    parse: parse.int(100, 3_600_000),
  }),
  allowedCidrs: setting({
    key: "allowedCidrs",
    env: "HOSTKEEPER_ALLOWED_CIDRS",
    area: "agent",
    doc: "Comma-separated address ranges (`10.0.0.0/8,fd00::/8`, a bare address for one host) allowed to connect to the API; a connection from anywhere else is closed as it is accepted, before TLS or HTTP. IPv4-mapped IPv6 peers count as IPv4. Include loopback (`127.0.0.1`, `::1`) for the local CLI and the unit's health probe.",
    defaultText: "any",
    default: [] as string[],
    parse: (raw) => parseCidrs(parse.list(raw)),
  }),
  allowPlaintext: setting({
    key: "allowPlaintext",
    env: "HOSTKEEPER_ALLOW_PLAINTEXT",
    area: "agent",
    doc: "Allow plain HTTP on a non-loopback `HOSTKEEPER_LISTEN`. Off, the agent refuses to start there without TLS: the token would cross the network in clear text. Set it only when the network itself is encrypted and trusted (a VPN or tunnel).",
    defaultText: "false",
    default: false,
    parse: parse.bool,
  }),
  cliTlsCa: setting({
    key: "cliTlsCa",
    env: "HOSTKEEPER_CLI_TLS_CA",
    area: "agent",
    doc: "CLI: PEM CA file to verify the agent's certificate with (its name must match the address the CLI connects to). Default: the CLI trusts exactly the certificate in `HOSTKEEPER_TLS_CERT` (the agent's own, pinned by fingerprint).",
    defaultText: "the agent's certificate",
    default: undefined as string | undefined,
    parse: path,
  }),
  cliTlsCert: setting({
    key: "cliTlsCert",
    env: "HOSTKEEPER_CLI_TLS_CERT",
    area: "agent",
    doc: "CLI: PEM client certificate the CLI presents when the agent requires one (`HOSTKEEPER_TLS_CLIENT_CA`), with `HOSTKEEPER_CLI_TLS_KEY`. The unit's health probe (`hostkeeper status --wait`) needs it too: put both in the config file.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: path,
  }),
  cliTlsKey: setting({
    key: "cliTlsKey",
    env: "HOSTKEEPER_CLI_TLS_KEY",
    area: "agent",
    doc: "CLI: PEM private key of `HOSTKEEPER_CLI_TLS_CERT`.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: path,
  }),
};

/** The settings that only make sense together; throws the ConfigError of the first that is alone. */
export function checkListenerPairs(c: {
  tlsCert: string | undefined;
  tlsKey: string | undefined;
  tlsClientCa: string | undefined;
  cliTlsCert: string | undefined;
  cliTlsKey: string | undefined;
}): void {
  const s = listenerSettings;
  if ((c.tlsCert === undefined) !== (c.tlsKey === undefined))
    throw new ConfigError(
      c.tlsCert === undefined ? s.tlsKey.env : s.tlsCert.env,
      `needs ${c.tlsCert === undefined ? s.tlsCert.env : s.tlsKey.env} too`,
    );
  if (c.tlsClientCa !== undefined && c.tlsCert === undefined)
    throw new ConfigError(
      s.tlsClientCa.env,
      `client certificates need TLS: set ${s.tlsCert.env} and ${s.tlsKey.env}`,
    );
  if ((c.cliTlsCert === undefined) !== (c.cliTlsKey === undefined))
    throw new ConfigError(
      c.cliTlsCert === undefined ? s.cliTlsKey.env : s.cliTlsCert.env,
      `needs ${c.cliTlsCert === undefined ? s.cliTlsCert.env : s.cliTlsKey.env} too`,
    );
}
