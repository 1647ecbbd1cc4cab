import type { AutomationPolicy } from "../caddy/tls-config.js";
import type { CustomCertificate } from "./custom-store.js";
import type { ObtainError } from "./obtain-errors.js";
import type { CertificateFacts } from "./pem.js";

export const CERTIFICATE_SOURCES = ["acme", "internal", "custom"] as const;
export const CERTIFICATE_STATUSES = ["valid", "expiring", "expired", "missing"] as const;
export type CertificateSource = (typeof CERTIFICATE_SOURCES)[number];
export type CertificateStatus = (typeof CERTIFICATE_STATUSES)[number];

/** One entry of `GET /v1/proxy/certificates` (the schema's `Certificate`). */
export interface CertificateEntry {
  host: string | null;
  name: string | null;
  names: string[];
  source: CertificateSource | null;
  issuer: string | null;
  serial: string | null;
  not_before: string | null;
  not_after: string | null;
  status: CertificateStatus;
  error: ObtainError | null;
}

/**
 * `expiring` when less time is left than both the warning (HOSTKEEPER_CERT_EXPIRY_WARNING_DAYS) and a third
 * of the certificate's life, which is when Caddy renews: a healthy 6-day or 12-hour certificate stays `valid`.
 */
export function statusOf(facts: CertificateFacts, now: number, warningMs: number): CertificateStatus {
  const left = facts.notAfter.getTime() - now;
  if (left <= 0) return "expired";
  const life = facts.notAfter.getTime() - facts.notBefore.getTime();
  return left < warningMs && left < life / 3 ? "expiring" : "valid";
}

/** Whether a certificate name covers a host: the same name, or a wildcard for exactly one more label. */
export function covers(certName: string, host: string): boolean {
  if (certName === host) return true;
  if (!certName.startsWith("*.")) return false;
  const dot = host.indexOf(".");
  return dot > 0 && host.slice(dot + 1) === certName.slice(2);
}

/**
 * The custom certificate Caddy serves for `host`, if any: loaded certificates win over managed ones for
 * their names, an exact name over a wildcard (Caddy tries the name first), and among several the one that
 * is valid longest.
 */
export function customFor(
  host: string,
  customs: readonly CustomCertificate[],
): CustomCertificate | undefined {
  const best = (list: CustomCertificate[]) =>
    list.sort((a, b) => b.facts.notAfter.getTime() - a.facts.notAfter.getTime())[0];
  return (
    best(customs.filter((c) => c.facts.names.includes(host))) ??
    best(customs.filter((c) => c.facts.names.some((n) => covers(n, host))))
  );
}

/** certmagic's issuer key of an ACME directory URL: its host, then its path with `/` as `-`. */
export function acmeIssuerKey(ca: string): string {
  try {
    const url = new URL(ca);
    const path = url.pathname.replace(/[/\\]/g, "-").replace(/^-+|-+$/g, "");
    return path === "" ? url.host : `${url.host}-${path}`;
  } catch {
    return ca;
  }
}

const LETS_ENCRYPT = "https://acme-v02.api.letsencrypt.org/directory";

/** The first automation policy that covers `host`, in Caddy's order (one without subjects covers every name). */
export function policyFor(host: string, policies: readonly AutomationPolicy[]): AutomationPolicy | undefined {
  return policies.find((p) => !p.subjects?.length || p.subjects.some((s) => covers(s, host)));
}

/**
 * The issuer keys Caddy loads a managed certificate under for the names of `policy`. Undefined when that
 * cannot be told (no policy, one without issuers, an issuer module other than `acme` and `internal`): then any.
 */
export function issuerKeysOf(policy: AutomationPolicy | undefined): string[] | undefined {
  if (!policy?.issuers?.length) return undefined;
  const keys: string[] = [];
  for (const issuer of policy.issuers) {
    if (issuer.module === "internal") keys.push(issuer.ca ?? "local");
    else if (issuer.module === "acme") keys.push(acmeIssuerKey(issuer.ca ?? LETS_ENCRYPT));
    else return undefined;
  }
  return keys;
}

/** The hosts the managed server's routes match, from Caddy's text of its routes: sorted, each once. */
export function hostsOf(routesText: string): string[] {
  const routes = JSON.parse(routesText) as { match?: { host?: unknown }[] }[] | null;
  const hosts = new Set<string>();
  for (const route of routes ?? [])
    for (const m of route.match ?? [])
      if (Array.isArray(m.host))
        for (const h of m.host) if (typeof h === "string") hosts.add(h.toLowerCase());
  return [...hosts].sort();
}

/** The entry's certificate fields from what a certificate says. */
export function certificateFields(
  facts: CertificateFacts,
): Pick<CertificateEntry, "names" | "issuer" | "serial" | "not_before" | "not_after"> {
  return {
    names: facts.names,
    issuer: facts.issuer,
    serial: facts.serial,
    not_before: facts.notBefore.toISOString(),
    not_after: facts.notAfter.toISOString(),
  };
}

/** A custom certificate's own entry (`host` null). */
export function customEntry(c: CustomCertificate, now: number, warningMs: number): CertificateEntry {
  return {
    host: null,
    name: c.name,
    ...certificateFields(c.facts),
    source: "custom",
    status: statusOf(c.facts, now, warningMs),
    error: null,
  };
}
