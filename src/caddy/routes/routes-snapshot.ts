import { PassThrough, type Readable } from "node:stream";
import { createDeflateRaw, createInflateRaw } from "node:zlib";

/**
 * The pieces a kept list is inflated in. A list holds about two while its reader takes them, and when many
 * clients list at once most of them are mid-list, so larger pieces add up to much memory held together.
 * Smaller pieces cost time, a wait for the client's socket to drain after each: this is the smallest size
 * at which a long list goes out as fast as with larger ones.
 */
const PIECE = 64 * 1024;

type Kept = { load: string; text: string } | { load: string; deflated: Buffer };

/**
 * The last list of routes read from Caddy, kept with the time of Caddy's config load it was read after
 * (caddy/last-load.ts), so that a list asked for while Caddy still holds that load is answered with the
 * same bytes without Caddy encoding its routes again (which costs Caddy time and memory at a large host,
 * where learning its last load is a small read of its metrics). Kept compressed, a small fraction of the
 * text: decompressed as it is sent, never held whole.
 */
export class RoutesSnapshot {
  private kept: Kept | undefined;
  /** The read being kept now, and when it is over (kept or not). */
  private pending: { load: string; over: Promise<void> } | undefined;

  /**
   * The routes as of `load`: kept ones, else those of the read of that load under way once it is over,
   * else read now with `read` and kept. Lists asked for together after a load read Caddy once: each read
   * makes Caddy encode every route, and many at once at a large host held Caddy up for a long time.
   */
  async get(load: string, read: () => Promise<Readable | string>): Promise<Readable | string> {
    const kept = this.at(load);
    if (kept !== undefined) return kept;
    const pending = this.pending;
    if (pending?.load === load) {
      await pending.over;
      const now = this.at(load);
      if (now !== undefined) return now;
    }
    let over = () => {};
    const mine = { load, over: new Promise<void>((resolve) => (over = resolve)) };
    this.pending = mine;
    mine.over.then(() => {
      if (this.pending === mine) this.pending = undefined;
    });
    try {
      return this.keep(load, await read(), over);
    } catch (err) {
      over();
      throw err;
    }
  }

  /** The routes as of `load`, if kept: text when small, else a stream of the bytes Caddy sent. */
  at(load: string): Readable | string | undefined {
    const k = this.kept;
    if (k === undefined || k.load !== load) return undefined;
    if ("text" in k) return k.text;
    const out = createInflateRaw({ chunkSize: PIECE });
    out.end(k.deflated);
    return out;
  }

  /**
   * Passes `body` (Caddy's routes, read after the load at `load`) on unchanged and keeps it once it has
   * been read whole, at Caddy's pace rather than the reader's (a slow or departed reader holds up no list
   * waiting for it; what it has not taken yet waits in its stream, at most the routes' size). A body that
   * fails half-way is not kept. `over` is called once it is kept or failed.
   */
  keep(load: string, body: Readable | string, over: () => void = () => {}): Readable | string {
    if (typeof body === "string") {
      this.kept = { load, text: body };
      over();
      return body;
    }
    const out = new PassThrough();
    const deflate = createDeflateRaw({ level: 1 });
    const parts: Buffer[] = [];
    let whole = false;
    deflate.on("data", (c: Buffer) => parts.push(c));
    deflate.on("end", () => {
      if (whole) this.kept = { load, deflated: Buffer.concat(parts) };
    });
    deflate.on("close", over);
    deflate.on("error", () => {});
    body.on("data", (chunk: Buffer) => {
      deflate.write(chunk);
      if (!out.destroyed) out.write(chunk);
    });
    body.on("end", () => {
      whole = true;
      deflate.end();
      out.end();
    });
    body.on("error", (err) => {
      deflate.destroy();
      out.destroy(err);
    });
    return out;
  }
}
