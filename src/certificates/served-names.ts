import { X509Certificate } from "node:crypto";
import { isIP } from "node:net";
import { namesOverlap } from "../proxy/route/operator-host.js";
import { certificateBlocks } from "./pem.js";

/** One subjectAltName entry as Node writes them: `TYPE:value`, a value with unsafe characters as a JSON string. */
const SAN_ENTRY = /([A-Za-z ]+):("(?:[^"\\]|\\.)*"|[^,]*)(?:, |$)/y;

function unquoted(raw: string): string {
  if (!raw.startsWith('"')) return raw;
  try {
    return String(JSON.parse(raw));
  } catch {
    return raw;
  }
}

/**
 * The DNS names and IP addresses of a subjectAltName text, each value as the certificate holds it. Text
 * past an entry this does not read is taken as `, `-separated values of any type: more names, never fewer.
 */
function altNames(text: string): string[] {
  const names: string[] = [];
  SAN_ENTRY.lastIndex = 0;
  while (SAN_ENTRY.lastIndex < text.length) {
    const at = SAN_ENTRY.lastIndex;
    const m = SAN_ENTRY.exec(text);
    if (m === null || m[0] === "") {
      for (const part of text.slice(at).split(", ")) names.push(part.slice(part.indexOf(":") + 1));
      break;
    }
    const [, type, raw = ""] = m;
    if (type === "DNS" || type === "IP Address") names.push(unquoted(raw));
  }
  return names;
}

/**
 * The names Caddy serves a certificate for: its subject's CNs, even beside a subjectAltName (certmagic
 * indexes a certificate under its CN too, which `factsOf` shows only without one), then the DNS names and
 * IP addresses of its subjectAltName.
 */
function servedNames(leaf: X509Certificate): string[] {
  const cn: unknown = leaf.toLegacyObject().subject?.CN;
  const cns = (Array.isArray(cn) ? cn : [cn]).filter((n): n is string => typeof n === "string");
  return [...cns, ...altNames(leaf.subjectAltName ?? "")];
}

/**
 * The first name of a chain's leaf under which Caddy would serve it for `host` (a route id: lowercase
 * punycode), in any spelling (case, trailing dot, Unicode, a `*` label); undefined when none would.
 */
export function nameCovering(certificatePem: string, host: string): string | undefined {
  const first = certificateBlocks(certificatePem)[0];
  if (first === undefined) return undefined;
  const leaf = new X509Certificate(first);
  const name = servedNames(leaf).find((n) => namesOverlap(n, host));
  if (name !== undefined) return name;
  // OpenSSL's own reading of the names, in case Node's text of them hid one from the reading above.
  return isIP(host) === 4
    ? leaf.checkIP(host)
    : leaf.checkHost(host, { subject: "always", partialWildcards: false });
}
