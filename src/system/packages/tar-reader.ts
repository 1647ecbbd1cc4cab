/** A member of a tar stream, read whole. */
export interface TarMember {
  name: string;
  data: Buffer;
}

const BLOCK = 512;

/** The data being read: of a member kept, or of a header that names the next member. */
interface Reading {
  kind: "member" | "long-name" | "pax";
  name: string;
  size: number;
  parts: Buffer[];
  got: number;
}

/**
 * Reads a tar stream as it arrives, chunk by chunk, and hands back the regular files `keep` accepts, each
 * as soon as its last byte arrived, so a caller can stop the stream once it has what it needs. Names come
 * from the header (with its ustar prefix), or from the GNU long-name (`L`, what dpkg-deb writes) or pax
 * (`x`, other .deb builders) header before it, without a leading `./` or `/`. Checksums are not checked.
 */
export class TarReader {
  private buffered: Buffer = Buffer.alloc(0);
  /** Bytes of the current entry's data, padding included, still to come. */
  private skip = 0;
  private reading: Reading | undefined;
  /** The name a long-name or pax header gave the next entry. */
  private nextName: string | undefined;

  constructor(private readonly keep: (name: string, size: number) => boolean) {}

  /** Reads `chunk`; answers the members it completed, in stream order. */
  push(chunk: Buffer): TarMember[] {
    this.buffered = this.buffered.length ? Buffer.concat([this.buffered, chunk]) : chunk;
    const done: TarMember[] = [];
    for (;;) {
      if (this.skip > 0 && !this.readData(done)) return done;
      if (this.buffered.length < BLOCK) return done;
      this.readHeader(done);
    }
  }

  /** Reads what has arrived of the current entry's data; false while more is to come. */
  private readData(done: TarMember[]): boolean {
    const n = Math.min(this.skip, this.buffered.length);
    const r = this.reading;
    if (r) {
      r.parts.push(this.buffered.subarray(0, Math.max(0, Math.min(n, r.size - r.got))));
      r.got += n;
    }
    this.buffered = this.buffered.subarray(n);
    this.skip -= n;
    if (this.skip > 0) return false;
    if (r) {
      this.reading = undefined;
      this.complete(r, Buffer.concat(r.parts).subarray(0, r.size), done);
    }
    return true;
  }

  private readHeader(done: TarMember[]): void {
    const header = this.buffered.subarray(0, BLOCK);
    this.buffered = this.buffered.subarray(BLOCK);
    // The end of the archive is two zero blocks; a zero block is skipped wherever it is.
    if (header.every((b) => b === 0)) return;
    const field = (off: number, len: number) =>
      header
        .subarray(off, off + len)
        .toString("utf8")
        .replace(/\0.*$/s, "");
    const size = Number.parseInt(field(124, 12).trim() || "0", 8);
    const type = field(156, 1);
    const prefix = field(345, 155);
    const name = (this.nextName ?? (prefix ? `${prefix}/${field(0, 100)}` : field(0, 100)))
      .replace(/^\.\//, "")
      .replace(/^\//, "");
    this.nextName = undefined;
    this.skip = Math.ceil(size / BLOCK) * BLOCK;
    const kind =
      type === "L"
        ? "long-name"
        : type === "x"
          ? "pax"
          : (type === "0" || type === "") && this.keep(name, size)
            ? "member"
            : undefined;
    if (kind === undefined) return;
    const reading: Reading = { kind, name, size, parts: [], got: 0 };
    if (this.skip === 0) this.complete(reading, Buffer.alloc(0), done);
    else this.reading = reading;
  }

  private complete(r: Reading, data: Buffer, done: TarMember[]): void {
    if (r.kind === "long-name") this.nextName = data.toString("utf8").replace(/\0.*$/s, "");
    else if (r.kind === "pax") this.nextName = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(data.toString("utf8"))?.[1];
    else done.push({ name: r.name, data });
  }
}
