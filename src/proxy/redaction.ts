import { pipeline, Readable, Transform } from "node:stream";

/** What a basic-auth secret reads as for a token that may not see it. */
export const REDACTED = "<redacted>";

/*
 * The secrets are found in the JSON text, not in parsed objects: the routes list goes out as Caddy's bytes,
 * never parsed or held whole, and one scanner for every answer leaves no answer shape to forget.
 *
 * A secret is the string value of a member named `password` (Caddy's `http_basic` accounts hold the hash
 * there, bcrypt or base64 of one; any other module's password is no less secret) or `password_hash` (a
 * write request's `basic_auth.users`), at any depth. The scanner looks only where `"password` occurs, so
 * text without it costs one search: the texts it reads are written by Go's encoding/json (Caddy answers
 * with its config encoded again) and by JavaScript's serialisers, which spell these names plainly (they
 * escape quotes, backslashes, control and a few HTML characters only). An occurrence is a member's name
 * when its quote is not escaped (an even run of backslashes before it: in JSON an unescaped quote before a
 * letter opens a string) and the name is followed by a colon; its string value is then skipped, escapes
 * included, and replaced. It keeps its state across chunks, so a secret split between two of Caddy's reads
 * is still found.
 */
const NEEDLE = Buffer.from('"password');
/** What ends the name after NEEDLE: `password` or `password_hash`. */
const NAME_ENDS = [Buffer.from('"'), Buffer.from('_hash"')];
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const EMPTY: Buffer = Buffer.alloc(0);
const REDACTED_BYTES: Buffer = Buffer.from(REDACTED);
const isSpace = (b: number | undefined) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;

/** Searching; after a secret's name (before its colon); after the colon; in its value. */
type State = "out" | "key" | "value" | "secret";

/** What follows `"password` at `at`: a secret's name ending at `end`, none, or not known yet. */
function secretName(buf: Buffer, at: number): { end: number } | "no" | "more" {
  const rest = at + NEEDLE.length;
  for (const want of NAME_ENDS) {
    let k = 0;
    while (k < want.length && rest + k < buf.length && buf[rest + k] === want[k]) k++;
    if (k === want.length) return { end: rest + k };
    if (rest + k === buf.length) return "more";
  }
  return "no";
}

/** One answer's JSON text, scanned chunk by chunk: `push` gives back what can go out, `end` the rest. */
export class SecretRedactor {
  private state: State = "out";
  /** Bytes held back: the start of what may be a secret's name, cut by the chunk's end. */
  private held: Buffer = EMPTY;
  /** Backslashes right before `held` (or, with nothing held, at the end of what was scanned). */
  private run = 0;
  /** Backslashes in a row so far in a secret's value. */
  private valueRun = 0;
  /** Whether any secret was replaced. */
  changed = false;

  /** `chunk` with its secrets replaced, in one piece. */
  push(chunk: Buffer): Buffer {
    const parts = this.scan(chunk);
    return parts.length === 1 && parts[0] !== undefined ? parts[0] : Buffer.concat(parts);
  }

  /** `chunk` with its secrets replaced, in the pieces it was cut into (no copy of the chunk). */
  scan(chunk: Buffer): Buffer[] {
    const buf = this.held.length === 0 ? chunk : Buffer.concat([this.held, chunk]);
    this.held = EMPTY;
    const parts: Buffer[] = [];
    // The first byte not yet given back; -1 while inside a secret's value, which is left out.
    let from = this.state === "secret" ? -1 : 0;
    let hold = buf.length;
    let i = 0;
    while (i < buf.length) {
      if (this.state === "out") {
        const at = buf.indexOf(NEEDLE, i);
        if (at === -1) {
          hold = partialNeedle(buf, i);
          break;
        }
        const name = this.runBefore(buf, at) % 2 === 1 ? "no" : secretName(buf, at);
        if (name === "more") {
          hold = at;
          break;
        }
        if (name === "no") i = at + 1;
        else {
          this.state = "key";
          i = name.end;
        }
      } else if (this.state === "secret") {
        i = this.skipValue(buf, i);
        if (i < buf.length) {
          from = i;
          this.state = "out";
          i++;
        }
      } else {
        const b = buf[i];
        if (isSpace(b)) i++;
        else if (this.state === "key" && b === COLON) {
          this.state = "value";
          i++;
        } else if (this.state === "value" && b === QUOTE) {
          parts.push(buf.subarray(from, i + 1), REDACTED_BYTES);
          this.changed = true;
          from = -1;
          this.state = "secret";
          this.valueRun = 0;
          i++;
        } else this.state = "out";
      }
    }
    this.run = this.runBefore(buf, hold);
    this.held = buf.subarray(hold);
    if (from !== -1 && hold > from) parts.push(buf.subarray(from, hold));
    return parts;
  }

  /** What was held back at the text's end. */
  end(): Buffer {
    const rest = this.held;
    this.held = EMPTY;
    return rest;
  }

  /** The backslashes right before `at` in `buf`, counting on into what came before it. */
  private runBefore(buf: Buffer, at: number): number {
    let j = at;
    while (j > 0 && buf[j - 1] === BACKSLASH) j--;
    return at - j + (j === 0 ? this.run : 0);
  }

  /** The index of the quote that ends the secret's value, or `buf.length` when it goes on. */
  private skipValue(buf: Buffer, from: number): number {
    for (let j = from; j < buf.length; j++) {
      const b = buf[j];
      if (b === QUOTE && this.valueRun % 2 === 0) return j;
      this.valueRun = b === BACKSLASH ? this.valueRun + 1 : 0;
    }
    return buf.length;
  }
}

/** Where a `"password` cut by the end of `buf` would start (from `i` on), else the end. */
function partialNeedle(buf: Buffer, i: number): number {
  for (let k = Math.max(i, buf.length - NEEDLE.length + 1); k < buf.length; k++)
    if (buf[k] === QUOTE && NEEDLE.subarray(0, buf.length - k).equals(buf.subarray(k))) return k;
  return buf.length;
}

/** A JSON text with its secrets replaced (the same string when it has none). */
export function redactText(text: string): string {
  if (!text.includes('"password')) return text;
  const r = new SecretRedactor();
  const out = Buffer.concat([r.push(Buffer.from(text)), r.end()]);
  return r.changed ? out.toString("utf8") : text;
}

/** `body` passed through a redactor, chunk by chunk; an error of `body` fails the result. */
export function redactStream(body: Readable): Readable {
  const r = new SecretRedactor();
  const out = new Transform({
    // The pieces as they are, not copied into one buffer a chunk: at a large host the copies of a list made
    // the collector run so often that the lists in between, a writing token's too, were much slower; the
    // pieces cost a few more writes to the socket.
    transform(chunk: Buffer, _enc, done) {
      for (const part of r.scan(chunk)) this.push(part);
      done();
    },
    flush(done) {
      const rest = r.end();
      done(null, rest.length === 0 ? undefined : rest);
    },
  });
  pipeline(body, out, () => {});
  return out;
}

/** An answer's payload as it goes out (a string, bytes or a stream), with its secrets replaced. */
export function redactPayload(payload: unknown): unknown {
  if (typeof payload === "string") return redactText(payload);
  if (Buffer.isBuffer(payload)) {
    const r = new SecretRedactor();
    return Buffer.concat([r.push(payload), r.end()]);
  }
  if (payload instanceof Readable) return redactStream(payload);
  return payload;
}
