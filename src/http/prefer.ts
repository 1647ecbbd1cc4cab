/**
 * The `Prefer` request header (RFC 7240): comma-separated preferences, each `token [= word] *(; parameter)`,
 * where a word is a token or a quoted string. Names are case-insensitive; a preference given more than once
 * counts the first time (section 2); several header lines are one list. Preferences that cannot be parsed
 * are ignored, as the RFC asks of a server that does not understand them.
 */
export interface Preference {
  /** The value after `=`, unquoted; undefined when there is none. */
  value: string | undefined;
  /** The preference's parameters, names lower-cased. */
  params: Map<string, string | undefined>;
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** Splits at `sep` outside quoted strings. */
function splitOutsideQuotes(text: string, sep: string): string[] {
  const parts: string[] = [];
  let current = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i] as string;
    if (quoted && c === "\\" && i + 1 < text.length) {
      current += c + text[++i];
      continue;
    }
    if (c === '"') quoted = !quoted;
    if (c === sep && !quoted) {
      parts.push(current);
      current = "";
    } else current += c;
  }
  parts.push(current);
  return parts;
}

/** `name[=value]` with BWS around `=`; the value a token or a quoted string. Undefined when malformed. */
function nameValue(text: string): [string, string | undefined] | undefined {
  const eq = text.indexOf("=");
  const name = (eq === -1 ? text : text.slice(0, eq)).trim();
  if (!TOKEN.test(name)) return undefined;
  if (eq === -1) return [name.toLowerCase(), undefined];
  const raw = text.slice(eq + 1).trim();
  if (raw.startsWith('"')) {
    if (raw.length < 2 || !raw.endsWith('"')) return undefined;
    return [name.toLowerCase(), raw.slice(1, -1).replace(/\\(.)/g, "$1")];
  }
  // `wait=` with an empty value is allowed by the grammar's BWS only as a token: an empty one is malformed.
  return TOKEN.test(raw) ? [name.toLowerCase(), raw] : undefined;
}

export function parsePrefer(header: string | string[] | undefined): Map<string, Preference> {
  const out = new Map<string, Preference>();
  const lines = header === undefined ? [] : Array.isArray(header) ? header : [header];
  for (const item of lines.flatMap((l) => splitOutsideQuotes(l, ","))) {
    if (item.trim() === "") continue;
    const [head = "", ...rest] = splitOutsideQuotes(item, ";");
    const pref = nameValue(head);
    if (!pref || out.has(pref[0])) continue;
    const params = new Map<string, string | undefined>();
    let ok = true;
    for (const p of rest) {
      if (p.trim() === "") continue;
      const nv = nameValue(p);
      if (!nv) ok = false;
      else if (!params.has(nv[0])) params.set(nv[0], nv[1]);
    }
    if (ok) out.set(pref[0], { value: pref[1], params });
  }
  return out;
}

/** `wait=N` (seconds, RFC 7240 section 4.3); undefined when absent or not a non-negative integer. */
export function preferredWaitSeconds(prefs: Map<string, Preference>): number | undefined {
  const v = prefs.get("wait")?.value;
  return v !== undefined && /^\d{1,9}$/.test(v) ? Number(v) : undefined;
}
