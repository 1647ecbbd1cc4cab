import type { ConfigField } from "./config-fields.js";
import type { TlsIssuer } from "./issuance-settings.js";
import { type TcpAddress, tcpAddresses } from "./process/listen-addresses.js";

/** The issuance settings (HOSTKEEPER_TLS_ISSUER and its companions), as the proxy's config holds them. */
export interface Issuance {
  tlsIssuer: TlsIssuer;
  acmeEmail: string | undefined;
  acmeCa: string | undefined;
  acmeCaRoot: string | undefined;
  caddyHttpPort: number;
  caddyHttpsPort: number;
}

/** Caddy's own defaults of `http_port` and `https_port`: a config without them means these. */
const CADDY_HTTP_PORT = 80;
const CADDY_HTTPS_PORT = 443;

/** The `@id` of the agent's automation policy, which no route id can take (a domain holds no colon). */
export const ISSUANCE_POLICY_ID = "hostkeeper:issuance";

/**
 * Caddy's local CA, never installed into the host's trust stores: Caddy run as root otherwise adds its
 * root to the system bundle, /usr/local/share/ca-certificates, Java's cacerts and NSS databases the
 * moment it first issues with it, which it does for `internal` and for hosts no public CA will certify
 * (`localhost`, IP addresses) whatever the issuer.
 */
export const LOCAL_CA_UNTRUSTED = { certificate_authorities: { local: { install_trust: false } } };

/**
 * The agent's automation policy, a catch-all one with the configured issuer; undefined for `off`, and for
 * `acme` with neither an e-mail nor a CA, where Caddy's own default issuers apply to every name without a
 * policy (and a Caddy set up by an earlier version of the agent needs no change).
 */
export function issuancePolicy(s: Issuance): Record<string, unknown> | undefined {
  if (s.tlsIssuer === "off") return undefined;
  if (s.tlsIssuer === "internal") return { "@id": ISSUANCE_POLICY_ID, issuers: [{ module: "internal" }] };
  if (s.acmeCa === undefined && s.acmeEmail === undefined && s.acmeCaRoot === undefined) return undefined;
  const issuer = {
    module: "acme",
    ...(s.acmeCa === undefined ? {} : { ca: s.acmeCa }),
    ...(s.acmeEmail === undefined ? {} : { email: s.acmeEmail }),
    ...(s.acmeCaRoot === undefined ? {} : { trusted_roots_pem_files: [s.acmeCaRoot] }),
  };
  return { "@id": ISSUANCE_POLICY_ID, issuers: [issuer] };
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** A policy without subjects applies to every name no earlier policy names (Caddy allows one). */
const isCatchAll = (p: unknown) =>
  isObject(p) && (!Array.isArray(p.subjects) || (p.subjects as unknown[]).length === 0);

/**
 * Caddy's automation policies as the agent keeps them: every policy that names its hosts kept as it is
 * and where it is, and the catch-all place the agent's (Caddy takes the first policy that matches a name,
 * and refuses a second catch-all): its own policy there, last, or none for Caddy's defaults. A catch-all
 * policy someone else wrote is removed, except with `off` (`ownsCatchAll` false), where the agent only
 * removes its own.
 */
export function policiesWith(
  current: unknown,
  policy: Record<string, unknown> | undefined,
  ownsCatchAll = policy !== undefined,
): unknown {
  const list = Array.isArray(current) ? (current as unknown[]) : [];
  const others = list.filter(
    (p) => !(isObject(p) && p["@id"] === ISSUANCE_POLICY_ID) && !(ownsCatchAll && isCatchAll(p)),
  );
  const out = policy ? [...others, policy] : others;
  return out.length === 0 && list.length === 0 ? current : out.length === 0 ? undefined : out;
}

/** A field the agent keeps in Caddy's config, and the settings (config-file keys) that ask for it. */
export interface AgentField extends ConfigField {
  askedBy: readonly string[];
}

/** The settings that choose the issuer; the ports' settings ask for their own fields only. */
export const ISSUER_KEYS = ["tlsIssuer", "acmeEmail", "acmeCa", "acmeCaRoot"];

/**
 * The fields of Caddy's config that carry the issuance settings, in the order they are written: the local
 * CA untrusted before any issuer could use it, then the issuer, the ports, and automatic HTTPS of the
 * managed server (off only for `off`).
 */
export function issuanceFields(s: Issuance, server: string): AgentField[] {
  const policy = issuancePolicy(s);
  const port = (key: string, value: number, caddyDefault: number, setting: string): AgentField => ({
    path: ["apps", "http", key],
    needs: 2,
    want: (current) => ((current ?? caddyDefault) === value ? current : value),
    askedBy: [setting],
  });
  return [
    {
      path: ["apps", "pki", "certificate_authorities", "local", "install_trust"],
      needs: 1,
      want: () => false,
      askedBy: [...ISSUER_KEYS, "caddyHttpPort", "caddyHttpsPort"],
    },
    {
      path: ["apps", "tls", "automation", "policies"],
      needs: 1,
      want: (c) => policiesWith(c, policy, s.tlsIssuer !== "off"),
      askedBy: ISSUER_KEYS,
    },
    port("http_port", s.caddyHttpPort, CADDY_HTTP_PORT, "caddyHttpPort"),
    port("https_port", s.caddyHttpsPort, CADDY_HTTPS_PORT, "caddyHttpsPort"),
    {
      path: ["apps", "http", "servers", server, "automatic_https", "disable"],
      needs: 4,
      want: (current) => (s.tlsIssuer === "off" ? true : current === true ? undefined : current),
      askedBy: ISSUER_KEYS,
    },
  ];
}

/**
 * Which listen addresses of the managed server serve TLS: with an issuer, every one whose port is not
 * Caddy's `http_port` (Caddy's rule for a server with hosts in its routes); with `off`, none.
 */
export function tlsAddresses(listen: readonly string[], s: Issuance): TcpAddress[] {
  if (s.tlsIssuer === "off") return [];
  return tcpAddresses(listen).filter((a) => a.port !== s.caddyHttpPort);
}

const isLoopbackHost = (host: string) =>
  host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);

/**
 * Said at start when a listen address would serve TLS with no way to get a certificate: the issuer is
 * `acme`, and no listen address is on the HTTP or HTTPS port (Caddy's `http_port`, `https_port`) of an
 * address a CA can reach (a wildcard or any but the loopback), where an ACME challenge (HTTP-01 or
 * TLS-ALPN-01) would be answered. A port forward from 80 or 443 to those ports counts as reaching them.
 * `internal` always has a certificate; `off` serves no TLS.
 */
export function issuanceWarnings(listen: readonly string[], s: Issuance): string[] {
  if (s.tlsIssuer !== "acme") {
    const unused = [
      s.acmeEmail && "HOSTKEEPER_ACME_EMAIL",
      s.acmeCa && "HOSTKEEPER_ACME_CA",
      s.acmeCaRoot && "HOSTKEEPER_ACME_CA_ROOT",
    ].filter(Boolean);
    return unused.length === 0
      ? []
      : [
          `${unused.join(" and ")} ${unused.length > 1 ? "are" : "is"} set but not used: HOSTKEEPER_TLS_ISSUER is ${s.tlsIssuer}`,
        ];
  }
  const tls = tlsAddresses(listen, s);
  if (tls.length === 0) return [];
  const challengeable = tcpAddresses(listen).some(
    (a) => (a.port === s.caddyHttpPort || a.port === s.caddyHttpsPort) && !isLoopbackHost(a.host),
  );
  if (challengeable) return [];
  const names = [...new Set(tls.map((a) => a.text))].join(", ");
  return [
    `HOSTKEEPER_CADDY_LISTEN ${names} will serve TLS (its port is not HOSTKEEPER_CADDY_HTTP_PORT ${s.caddyHttpPort}), ` +
      `but with HOSTKEEPER_TLS_ISSUER=acme no listen address is on port ${s.caddyHttpPort} or ${s.caddyHttpsPort} ` +
      "(HOSTKEEPER_CADDY_HTTP_PORT, HOSTKEEPER_CADDY_HTTPS_PORT) of an address a CA can reach, where its ACME challenge is answered: " +
      "its hosts get no certificate and every TLS handshake there fails. Set HOSTKEEPER_CADDY_HTTP_PORT to the port that should serve plain HTTP, " +
      "HOSTKEEPER_TLS_ISSUER=internal or off, or listen on those ports. See docs/https.md",
  ];
}
