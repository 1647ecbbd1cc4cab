import { ConfigError, parse, setting } from "../config.js";

/** Whether `host` (of a URL) is this machine's loopback, where Caddy also accepts a CA over plain HTTP. */
const isLoopback = (host: string) =>
  host === "localhost" || host === "[::1]" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);

/** An ACME directory URL Caddy will use: https, or http on the loopback (a CA on this machine). */
export function parseAcmeCa(raw: unknown): string | undefined {
  const s = parse.optionalString(raw);
  if (s === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(s);
  } catch {
    throw new Error(`expected the https:// URL of an ACME directory, got "${s}"`);
  }
  if (url.protocol !== "https:" && !(url.protocol === "http:" && isLoopback(url.hostname)))
    throw new Error(
      `expected the https:// URL of an ACME directory (http:// only on this machine's loopback), got "${s}"`,
    );
  // Caddy expands placeholders in the CA's URL: `{env.X}` would be read from Caddy's environment.
  if (/[{}\s]/.test(s) || url.username || url.password)
    throw new Error(`"${s}" holds braces, spaces or credentials, which an ACME directory URL does not`);
  return url.href;
}

/** An e-mail address for the ACME account: one `@`, no spaces, no `mailto:`, no placeholder braces. */
export function parseAcmeEmail(raw: unknown): string | undefined {
  const s = parse.optionalString(raw);
  if (s === undefined) return undefined;
  if (!/^[^@\s{}:<>,;"]+@[^@\s{}:<>,;"/]+\.[^@\s{}:<>,;"/]+$/.test(s))
    throw new Error(`expected an e-mail address such as ops@example.com, got "${s}"`);
  return s;
}

/**
 * A PEM file of the roots Caddy trusts for the ACME CA's own HTTPS (a private CA): an absolute path, with no
 * placeholder braces (Caddy would expand them). Caddy reads it; the agent passes the path on.
 */
export function parseAcmeCaRoot(raw: unknown): string | undefined {
  const s = parse.optionalString(raw);
  if (s === undefined) return undefined;
  if (!s.startsWith("/") || /[{}\n]/.test(s))
    throw new Error(`expected the absolute path of a PEM file, with no braces, got "${s}"`);
  return s;
}

export const TLS_ISSUERS = ["acme", "internal", "off"] as const;
export type TlsIssuer = (typeof TLS_ISSUERS)[number];

/**
 * How the managed server's hosts get their certificates, and which of its listen addresses serve TLS
 * (docs/https.md). Part of the proxy's settings.
 */
export const issuanceSettings = {
  tlsIssuer: setting({
    key: "tlsIssuer",
    env: "HOSTKEEPER_TLS_ISSUER",
    area: "proxy",
    doc: "Where the managed server's hosts get their certificates: `acme` (an ACME CA, see `HOSTKEEPER_ACME_CA`), `internal` (Caddy's local CA, trusted by no one unless you install its root: private networks, staging hosts) or `off` (no TLS: plain HTTP on every listen address, behind a load balancer that terminates TLS). Applied to Caddy's `tls` app and the managed server's automatic HTTPS at the agent's start (with `HOSTKEEPER_CADDY_ADMIN` only when this or an `HOSTKEEPER_ACME_EMAIL`, `HOSTKEEPER_ACME_CA` or `HOSTKEEPER_ACME_CA_ROOT` setting is set: a Caddy of your own keeps its TLS settings otherwise) and whenever the agent creates the HTTP app. Whatever the issuer, Caddy never installs its local CA into the host's trust stores. See HTTPS and certificates.",
    defaultText: "acme",
    default: "acme" as TlsIssuer,
    parse: parse.enumOf(TLS_ISSUERS),
  }),
  acmeEmail: setting({
    key: "acmeEmail",
    env: "HOSTKEEPER_ACME_EMAIL",
    area: "proxy",
    doc: "E-mail address of the ACME account (issuer `acme`): the CA may write to it about the account and its certificates.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: parseAcmeEmail,
  }),
  acmeCa: setting({
    key: "acmeCa",
    env: "HOSTKEEPER_ACME_CA",
    area: "proxy",
    doc: "Directory URL of the ACME CA (issuer `acme`), `https://...` (`http://` only on the loopback, for a CA on the same machine). Unset: Caddy's default ACME CA.",
    defaultText: "Caddy's default",
    default: undefined as string | undefined,
    parse: parseAcmeCa,
  }),
  acmeCaRoot: setting({
    key: "acmeCaRoot",
    env: "HOSTKEEPER_ACME_CA_ROOT",
    area: "proxy",
    doc: "Absolute path of a PEM file of the root certificates Caddy trusts for the ACME CA's own HTTPS (issuer `acme`): a private CA whose certificate is in no system store. Caddy reads it; unset, Caddy trusts the system's roots.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: parseAcmeCaRoot,
  }),
  caddyHttpPort: setting({
    key: "caddyHttpPort",
    env: "HOSTKEEPER_CADDY_HTTP_PORT",
    area: "proxy",
    doc: "Caddy's `http_port`: listen addresses on this port serve plain HTTP (and redirect to HTTPS); every other listen address serves TLS unless the issuer is `off`. ACME's HTTP challenge is answered here. Written at the agent's start (with `HOSTKEEPER_CADDY_ADMIN` only when this is set).",
    defaultText: "80",
    default: 80,
    parse: parse.int(1, 65535),
  }),
  caddyHttpsPort: setting({
    key: "caddyHttpsPort",
    env: "HOSTKEEPER_CADDY_HTTPS_PORT",
    area: "proxy",
    doc: "Caddy's `https_port`: where the HTTP-to-HTTPS redirects point (named in their URL unless 443), and where ACME's TLS-ALPN challenge is answered. Written at the agent's start (with `HOSTKEEPER_CADDY_ADMIN` only when this is set).",
    defaultText: "443",
    default: 443,
    parse: parse.int(1, 65535),
  }),
};

/** The settings that must agree with each other; throws a ConfigError naming the pair. */
export function checkIssuancePairs(s: { caddyHttpPort: number; caddyHttpsPort: number }): void {
  if (s.caddyHttpPort === s.caddyHttpsPort)
    throw new ConfigError(
      "HOSTKEEPER_CADDY_HTTPS_PORT",
      `must differ from HOSTKEEPER_CADDY_HTTP_PORT (both ${s.caddyHttpPort}): a port serves either plain HTTP or TLS`,
    );
}
