/**
 * XXH64 (seed 0), the hash of Caddy's ETags (cespare/xxhash), on 32-bit halves: JavaScript numbers hold 53
 * bits exactly, and a WebAssembly build of it would cost the agent a WebAssembly engine's resident memory
 * for one hash. Each 64-bit value is a pair [high, low] of unsigned 32-bit numbers.
 */

// The five primes of XXH64, as [high, low].
const P1_HI = 0x9e3779b1;
const P1_LO = 0x85ebca87;
const P2_HI = 0xc2b2ae3d;
const P2_LO = 0x27d4eb4f;
const P3_HI = 0x165667b1;
const P3_LO = 0x9e3779f9;
const P4_HI = 0x85ebca77;
const P4_LO = 0xc2b2ae63;
const P5_HI = 0x27d4eb2f;
const P5_LO = 0x165667c5;

/** The high 32 bits of the 64-bit product of two unsigned 32-bit numbers. */
function mulHigh(a: number, b: number): number {
  const a0 = a & 0xffff;
  const a1 = a >>> 16;
  const b0 = b & 0xffff;
  const b1 = b >>> 16;
  const mid = a1 * b0 + a0 * b1;
  return (a1 * b1 + Math.floor((mid + ((a0 * b0) >>> 16)) / 65536)) >>> 0;
}

/** A 64-bit accumulator and the arithmetic XXH64 needs, modulo 2^64. */
class U64 {
  hi = 0;
  lo = 0;

  set(hi: number, lo: number): this {
    this.hi = hi >>> 0;
    this.lo = lo >>> 0;
    return this;
  }

  add(hi: number, lo: number): this {
    const l = this.lo + lo;
    this.hi = (this.hi + hi + (l > 0xffffffff ? 1 : 0)) >>> 0;
    this.lo = l >>> 0;
    return this;
  }

  mul(hi: number, lo: number): this {
    const h = (mulHigh(this.lo, lo) + Math.imul(this.hi, lo) + Math.imul(this.lo, hi)) >>> 0;
    this.lo = Math.imul(this.lo, lo) >>> 0;
    this.hi = h;
    return this;
  }

  rotl(n: number): this {
    const { hi, lo } = this;
    if (n >= 32) {
      n -= 32;
      if (n === 0) return this.set(lo, hi);
      return this.set((lo << n) | (hi >>> (32 - n)), (hi << n) | (lo >>> (32 - n)));
    }
    return this.set((hi << n) | (lo >>> (32 - n)), (lo << n) | (hi >>> (32 - n)));
  }

  xor(hi: number, lo: number): this {
    return this.set(this.hi ^ hi, this.lo ^ lo);
  }

  /** this ^= this >>> n, for 32 <= n < 64 or n < 32. */
  xorShifted(n: number): this {
    if (n >= 32) return this.set(this.hi, this.lo ^ (this.hi >>> (n - 32)));
    return this.set(this.hi ^ (this.hi >>> n), this.lo ^ ((this.lo >>> n) | (this.hi << (32 - n))));
  }
}

/** acc = rotl(acc + lane * P2, 31) * P1: XXH64's round. */
function round(acc: U64, hi: number, lo: number, t: U64): void {
  t.set(hi, lo).mul(P2_HI, P2_LO);
  acc.add(t.hi, t.lo).rotl(31).mul(P1_HI, P1_LO);
}

/** h = (h ^ round(0, v)) * P1 + P4: how each of the four accumulators joins the hash. */
function merge(h: U64, v: U64, t: U64, z: U64): void {
  z.set(0, 0);
  round(z, v.hi, v.lo, t);
  h.xor(z.hi, z.lo).mul(P1_HI, P1_LO).add(P4_HI, P4_LO);
}

/** XXH64 with seed 0 of bytes given in pieces: the same hash as of all of them at once. */
export class Xxh64 {
  private readonly v1 = new U64().set(P1_HI, P1_LO).add(P2_HI, P2_LO);
  private readonly v2 = new U64().set(P2_HI, P2_LO);
  private readonly v3 = new U64();
  // 0 - P1
  private readonly v4 = new U64().set(~P1_HI, ~P1_LO).add(0, 1);
  private readonly t = new U64();
  /** Bytes taken into the four accumulators, 32 at a time. */
  private striped = 0;
  /** Bytes given that do not make a whole stripe yet. */
  private readonly tail = new Uint8Array(32);
  private tailLength = 0;
  private readonly tailView = new DataView(this.tail.buffer);

  /** Adds `bytes[start, end)`. */
  update(bytes: Uint8Array, start = 0, end = bytes.byteLength): this {
    let i = start;
    if (this.tailLength > 0) {
      const take = Math.min(32 - this.tailLength, end - i);
      this.tail.set(bytes.subarray(i, i + take), this.tailLength);
      this.tailLength += take;
      i += take;
      if (this.tailLength < 32) return this;
      this.stripe(this.tailView, 0);
      this.tailLength = 0;
    }
    if (end - i >= 32) {
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      for (; i + 32 <= end; i += 32) this.stripe(view, i);
    }
    this.tail.set(bytes.subarray(i, end), 0);
    this.tailLength = end - i;
    return this;
  }

  /** The hash of the bytes added so far, as 16 lowercase hex digits. */
  digestHex(): string {
    const { v1, v2, v3, v4, t } = this;
    const h = new U64();
    const z = new U64();
    if (this.striped > 0) {
      h.set(v1.hi, v1.lo).rotl(1);
      z.set(v2.hi, v2.lo).rotl(7);
      h.add(z.hi, z.lo);
      z.set(v3.hi, v3.lo).rotl(12);
      h.add(z.hi, z.lo);
      z.set(v4.hi, v4.lo).rotl(18);
      h.add(z.hi, z.lo);
      for (const v of [v1, v2, v3, v4]) merge(h, v, t, z);
    } else h.set(P5_HI, P5_LO);
    const len = this.striped + this.tailLength;
    h.add(Math.floor(len / 2 ** 32), len >>> 0);
    const view = this.tailView;
    const end = this.tailLength;
    let i = 0;
    for (; i + 8 <= end; i += 8) {
      z.set(0, 0);
      round(z, view.getUint32(i + 4, true), view.getUint32(i, true), t);
      h.xor(z.hi, z.lo).rotl(27).mul(P1_HI, P1_LO).add(P4_HI, P4_LO);
    }
    if (i + 4 <= end) {
      t.set(0, view.getUint32(i, true)).mul(P1_HI, P1_LO);
      h.xor(t.hi, t.lo).rotl(23).mul(P2_HI, P2_LO).add(P3_HI, P3_LO);
      i += 4;
    }
    for (; i < end; i++) {
      t.set(0, this.tail[i] as number).mul(P5_HI, P5_LO);
      h.xor(t.hi, t.lo).rotl(11).mul(P1_HI, P1_LO);
    }
    h.xorShifted(33).mul(P2_HI, P2_LO).xorShifted(29).mul(P3_HI, P3_LO).xorShifted(32);
    return h.hi.toString(16).padStart(8, "0") + h.lo.toString(16).padStart(8, "0");
  }

  private stripe(view: DataView, i: number): void {
    const t = this.t;
    round(this.v1, view.getUint32(i + 4, true), view.getUint32(i, true), t);
    round(this.v2, view.getUint32(i + 12, true), view.getUint32(i + 8, true), t);
    round(this.v3, view.getUint32(i + 20, true), view.getUint32(i + 16, true), t);
    round(this.v4, view.getUint32(i + 28, true), view.getUint32(i + 24, true), t);
    this.striped += 32;
  }
}

const encoder = new TextEncoder();

/**
 * XXH64 of the UTF-8 of texts given in pieces, encoded a piece at a time into one small buffer: a long text
 * is hashed without being encoded whole (encoding the routes whole took longer than hashing them).
 */
export class Utf8Xxh64 {
  private readonly hash = new Xxh64();
  private readonly buffer = new Uint8Array(64 * 1024);
  private used = 0;

  add(text: string): this {
    let rest = text;
    for (;;) {
      const { read, written } = encoder.encodeInto(rest, this.buffer.subarray(this.used));
      this.used += written;
      if (read === rest.length) return this;
      // Full (or the next character does not fit): hash what is there and go on with the rest.
      this.hash.update(this.buffer, 0, this.used);
      this.used = 0;
      rest = rest.slice(read);
    }
  }

  digestHex(): string {
    this.hash.update(this.buffer, 0, this.used);
    this.used = 0;
    return this.hash.digestHex();
  }
}
