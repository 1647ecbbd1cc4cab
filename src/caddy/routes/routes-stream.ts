import { pipeline, type Readable, Transform } from "node:stream";

/** Bytes up to which a routes answer Caddy sized is read whole rather than streamed. */
const SMALL_ANSWER = 64 * 1024;

/**
 * Caddy's answer for the routes path as the API passes it on: read whole when Caddy sized it small (it
 * sizes what fits its first buffer), streamed otherwise, `null` (a server without a routes key) as `[]`.
 * A body Caddy breaks off fails the stream (and so the answer), rather than ending it short.
 */
export async function routesBody(body: Readable, contentLength: number): Promise<Readable | string> {
  if (contentLength <= SMALL_ANSWER) {
    const text = await readAll(body);
    return text.trim() === "null" ? "[]" : text;
  }
  const out = nullAsEmpty();
  pipeline(body, out, () => {});
  return out;
}

/** Reads a stream to its end as UTF-8 text. */
export async function readAll(body: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * Passes Caddy's answer for the routes path through unchanged, except `null` (a server without a routes
 * key), which becomes `[]`. Only the first bytes are looked at.
 */
function nullAsEmpty(): Transform {
  let decided: "pass" | "null" | undefined;
  let head = "";
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      if (decided === "pass") return done(null, chunk);
      if (decided === "null") return done();
      head += chunk.toString("latin1");
      const first = head.trimStart();
      if (first === "") return done();
      decided = first[0] === "n" ? "null" : "pass";
      if (decided === "null") return done();
      const out = Buffer.from(head, "latin1");
      head = "";
      done(null, out);
    },
    flush(done) {
      done(null, decided === "null" ? "[]" : head === "" ? undefined : Buffer.from(head, "latin1"));
    },
  });
}
