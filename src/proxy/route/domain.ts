import { isIP } from "node:net";
import { domainToASCII, domainToUnicode } from "node:url";

export type Parsed<T> = ({ ok: true } & T) | { ok: false; message: string };

/**
 * The route id rule, in this order: IDNA ToASCII (UTS #46: case folded, full-width forms and the
 * ideographic full stops `。` `．` `｡` mapped, Unicode labels to punycode), then one trailing dot dropped;
 * `App.Bücher.example。` becomes `app.xn--bcher-kva.example`. A leading `*.` label is a wildcard. The same
 * value is the id and the host matcher, since Caddy's host matcher compares punycode and ids are
 * case-sensitive. An IPv4 address is taken in its dotted-quad form only. Returns an error message for a
 * domain that cannot be a host.
 */
export function normalizeDomain(input: string): Parsed<{ domain: string }> {
  const raw = input.trim();
  if (raw === "") return { ok: false, message: "must not be empty" };
  if (/[/\\"@:?#%\s[\]]/.test(raw))
    return {
      ok: false,
      message: "must be a host name (no ports, paths or wildcards other than a leading *.)",
    };
  let ascii = domainToASCII(raw).toLowerCase();
  if (ascii === "") return { ok: false, message: "is not a valid internationalised domain name" };
  if (ascii.endsWith(".")) ascii = ascii.slice(0, -1);
  // ToASCII reads a numeric last label as IPv4 (`127.1` is 127.0.0.1): only the dotted quad as written is one.
  if (isIP(ascii) === 4 && ascii !== raw.replace(/\.$/, ""))
    return {
      ok: false,
      message: "is an IPv4 address in a shortened or non-decimal form; write it as a.b.c.d",
    };
  const wildcard = ascii.startsWith("*.");
  const host = wildcard ? ascii.slice(2) : ascii;
  if (host === "") return { ok: false, message: "must not be empty" };
  if (host.length > 253) return { ok: false, message: "is longer than 253 characters" };
  for (const label of host.split(".")) {
    if (label.length === 0 || label.length > 63 || !/^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?$/.test(label))
      return { ok: false, message: `has an invalid label "${label}"` };
    if (label.startsWith("xn--") && !isCanonicalPunycode(label))
      return { ok: false, message: `has a label that is not valid punycode "${label}"` };
  }
  return { ok: true, domain: ascii };
}

/**
 * An `xn--` label must decode to a Unicode label that encodes back to exactly it. Node 20's ToASCII
 * refused an undecodable one (`xn--a`), Node 24's passes it through unchanged; neither refuses one that is
 * not the canonical encoding of its decoding (`xn--a-` is plain `a`).
 */
function isCanonicalPunycode(label: string): boolean {
  const unicode = domainToUnicode(label);
  return unicode !== "" && !unicode.startsWith("xn--") && domainToASCII(unicode) === label;
}

const PORT_RE = /^[1-9]\d{0,4}$/;

/**
 * An upstream's `host:port`: a port in 1-65535; host a DNS name, an IPv4 literal or a bracketed IPv6
 * literal; no whitespace anywhere. What Caddy gets is the validated form: names as their route-id form
 * (lowercase punycode, no trailing dot), addresses as given.
 */
export function parseDial(dial: string): Parsed<{ dial: string }> {
  if (/[\s\p{Cc}]/u.test(dial)) return { ok: false, message: "must not contain whitespace" };
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d+)$/.exec(dial);
  if (!m) return { ok: false, message: "must be host:port (IPv6 hosts in brackets)" };
  const [, v6, host, port = ""] = m;
  if (!PORT_RE.test(port) || Number(port) > 65535)
    return { ok: false, message: "must have a port between 1 and 65535" };
  if (v6 !== undefined)
    return isIP(v6) === 6 ? { ok: true, dial } : { ok: false, message: "has an invalid IPv6 address" };
  if (host === undefined || isIP(host) === 4) return { ok: true, dial };
  const d = normalizeDomain(host);
  return d.ok && !d.domain.startsWith("*")
    ? { ok: true, dial: `${d.domain}:${port}` }
    : { ok: false, message: "has an invalid host" };
}
