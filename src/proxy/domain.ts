import { domainToASCII } from "node:url";

/**
 * The route id rule: a domain is lowercased, converted to ASCII (IDNA punycode), and loses a trailing
 * dot; `App.Bücher.example.` becomes `app.xn--bcher-kva.example`. A leading `*.` label is a wildcard.
 * The same value is the id and the host matcher, since Caddy's host matcher compares punycode and ids are
 * case-sensitive. Returns an error message for a domain that cannot be a host.
 */
export function normalizeDomain(
  input: string,
): { ok: true; domain: string } | { ok: false; message: string } {
  let d = input.trim();
  if (d.endsWith(".")) d = d.slice(0, -1);
  if (d === "") return { ok: false, message: "must not be empty" };
  let wildcard = false;
  if (d.startsWith("*.")) {
    wildcard = true;
    d = d.slice(2);
  }
  if (/[/\\"@:?#%\s*[\]]/.test(d))
    return {
      ok: false,
      message: "must be a host name (no ports, paths or wildcards other than a leading *.)",
    };
  const ascii = domainToASCII(d).toLowerCase();
  if (ascii === "") return { ok: false, message: "is not a valid internationalised domain name" };
  if (ascii.length > 253) return { ok: false, message: "is longer than 253 characters" };
  const labels = ascii.split(".");
  for (const label of labels) {
    if (label.length === 0 || label.length > 63 || !/^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?$/.test(label))
      return { ok: false, message: `has an invalid label "${label}"` };
  }
  return { ok: true, domain: wildcard ? `*.${ascii}` : ascii };
}
