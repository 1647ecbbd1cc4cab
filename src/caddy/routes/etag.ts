import { Utf8Xxh64 } from "./xxh64.js";

/**
 * The ETag Caddy's admin API gives the value at `path` when that value is `value` (admin.go `makeEtag`):
 * `"<path> <hex of XXH64>"` over the text Caddy's GET of that path writes (see `goJson`). The agent writes
 * the routes, so it knows what they hold after a write and need not read them all back for their ETag. A
 * wrong one costs no more than a read: Caddy answers the next write's If-Match with 412 and nothing changes.
 * An array's (the routes') is hashed from its elements' texts, kept with them, never joined into one text.
 */
export function caddyEtag(path: string, value: unknown): string {
  if (!Array.isArray(value)) return caddyEtagOfText(path, goJson(value));
  const hash = new Utf8Xxh64();
  for (const piece of goJsonPieces(value)) hash.add(piece);
  return `"${path} ${hash.digestHex()}"`;
}

/** The same, from `goJson`'s text of the value (Caddy's own text, read or kept). */
export function caddyEtagOfText(path: string, text: string): string {
  return `"${path} ${new Utf8Xxh64().add(text).digestHex()}"`;
}

/**
 * The text Caddy's GET writes for `value` once the agent has sent it as JSON (JSON.stringify): Go's
 * encoding/json after decoding into `any` (Caddy keeps its config so and writes it with a json.Encoder).
 * Object keys sorted by their UTF-8 bytes; `<`, `>`, `&`, U+2028 and U+2029 escaped; a lone surrogate
 * replaced by U+FFFD, as Go's decoder does; numbers as JavaScript and Go both write a float64 (`-0`, which
 * JSON.stringify sends as `0`, too); a newline at the end. Values parsed from Caddy's text give it back.
 */
export function goJson(value: unknown): string {
  if (!Array.isArray(value)) return `${textOf(value)}\n`;
  return [...goJsonPieces(value)].join("");
}

/**
 * `goJson`'s text of an array, piece by piece: each element's text (kept with it), "," between them, inside
 * "[" and "]" and a newline. The ETag hashes these pieces, and a batch's request body is written from them
 * (never held as one text, however many routes there are).
 */
export function* goJsonPieces(value: readonly unknown[]): Generator<string, void, undefined> {
  yield "[";
  for (let i = 0; i < value.length; i++) {
    if (i > 0) yield ",";
    yield elementText(value[i]);
  }
  yield "]\n";
}

/**
 * The text of each array element encoded so far (the routes: objects the agent never changes once made, a
 * change puts a new object in a new array), so a write's ETag encodes only the routes it brought.
 */
const texts = new WeakMap<object, string>();

function elementText(v: unknown): string {
  if (v === null || typeof v !== "object") return textOf(v);
  let t = texts.get(v);
  if (t === undefined) {
    t = textOf(v);
    texts.set(v, t);
  }
  return t;
}

/** JSON.stringify's text when it is Go's but for the HTML escapes (keys in Go's order, no lone surrogate), else `encode`'s. */
function textOf(v: unknown): string {
  if (inGoOrder(v)) {
    const t = JSON.stringify(v) ?? "null";
    if (!LONE_SURROGATE.test(t)) return htmlEscaped(t);
  }
  return encode(v);
}

/** An escaped lone surrogate in JSON.stringify's text (or a backslash before such text: then `encode` is merely slower). */
const LONE_SURROGATE = /\\ud[89a-f]/;

/** Whether every object's keys come in Go's order (see `sortedKeys`). */
function inGoOrder(v: unknown): boolean {
  if (v === null || typeof v !== "object") return true;
  if (Array.isArray(v)) {
    for (const x of v) if (!inGoOrder(x)) return false;
    return true;
  }
  let prev: string | undefined;
  for (const k in v) {
    if (prev !== undefined && !goOrdered(prev, k)) return false;
    if (!inGoOrder((v as Record<string, unknown>)[k])) return false;
    prev = k;
  }
  return true;
}

/**
 * Whether `a` comes before `b` in Go's order (UTF-8 bytes); false as well when UTF-16 order, which is the
 * same but where a surrogate meets a character from U+E000 on, cannot tell (then `encode` sorts the keys).
 */
function goOrdered(a: string, b: string): boolean {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return x < y && y < 0xd800;
  }
  return a.length < b.length;
}

const HTML_UNSAFE = /[<>&\u2028\u2029]/;
const HTML_UNSAFE_ALL = /[<>&\u2028\u2029]/g;
const HTML_ESCAPES: Record<string, string> = {
  "<": "\\u003c",
  ">": "\\u003e",
  "&": "\\u0026",
  "\u2028": "\\u2028",
  "\u2029": "\\u2029",
};

/** JSON text with the characters Go escapes besides JSON.stringify's escaped as Go does. */
function htmlEscaped(json: string): string {
  return HTML_UNSAFE.test(json) ? json.replace(HTML_UNSAFE_ALL, (c) => HTML_ESCAPES[c] ?? c) : json;
}

function encode(v: unknown): string {
  if (typeof v === "string") return encodeString(v);
  if (typeof v === "number") return Number.isFinite(v) ? String(v) : "null";
  if (v === null || typeof v !== "object") return typeof v === "boolean" ? String(v) : "null";
  if (Array.isArray(v)) {
    let out = "[";
    for (let i = 0; i < v.length; i++) {
      if (i > 0) out += ",";
      out += encode(v[i]);
    }
    return `${out}]`;
  }
  const o = v as Record<string, unknown>;
  let out = "{";
  let first = true;
  for (const k of sortedKeys(o)) {
    const x = o[k];
    if (x === undefined || typeof x === "function" || typeof x === "symbol") continue;
    out += `${first ? "" : ","}${encodeString(k)}:${encode(x)}`;
    first = false;
  }
  return `${out}}`;
}

/**
 * JSON.stringify's escapes are Go's (the short ones `\b \f \n \r \t`, `\u00xx` for the other control
 * characters, lowercase) but for the HTML characters Go escapes too and lone surrogates, which Go's decoder
 * has turned into U+FFFD.
 */
function encodeString(s: string): string {
  return htmlEscaped(JSON.stringify(s.isWellFormed() ? s : s.toWellFormed()));
}

/** Keys in Go's order: by UTF-8 bytes, which is UTF-16 order unless `goOrdered` cannot tell. */
function sortedKeys(o: Record<string, unknown>): string[] {
  const keys = Object.keys(o).sort();
  if (keys.every((k, i) => i === 0 || goOrdered(keys[i - 1] as string, k))) return keys;
  return keys
    .map((k) => ({ k, b: Buffer.from(k.toWellFormed(), "utf8") }))
    .sort((a, b) => Buffer.compare(a.b, b.b))
    .map((x) => x.k);
}
