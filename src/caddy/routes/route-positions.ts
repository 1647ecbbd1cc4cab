import type { RouteJson } from "./plan.js";

/**
 * Where each route id was in the routes last parsed or written: a hint for reading one route alone, kept for
 * as long as the agent runs. A 32-bit hash of each route's `@id` by position (four bytes a route, outside
 * V8's heap), not a map of the ids: that map, and the id strings it kept alive after the parsed routes were
 * let go, held many times as much of the heap. A hint may be wrong (two ids of one hash, routes changed
 * in Caddy by someone else), so whoever reads a hinted position checks the `@id` it finds there.
 */
export class RoutePositions {
  private hashes: Int32Array;
  private length: number;

  private constructor(hashes: Int32Array, length: number) {
    this.hashes = hashes;
    this.length = length;
  }

  static of(routes: readonly RouteJson[]): RoutePositions {
    const hashes = new Int32Array(routes.length);
    for (let i = 0; i < routes.length; i++) hashes[i] = idHash((routes[i] as RouteJson)["@id"]);
    return new RoutePositions(hashes, routes.length);
  }

  static none(): RoutePositions {
    return new RoutePositions(new Int32Array(0), 0);
  }

  /** The positions that may hold `id`, first first: almost always one, or none. */
  of(id: string): number[] {
    const h = idHash(id);
    const found: number[] = [];
    for (let i = 0; i < this.length; i++) if (this.hashes[i] === h) found.push(i);
    return found;
  }

  /** The route at `at` went: the ones after it move up. */
  removeAt(at: number): void {
    if (at < 0 || at >= this.length) {
      this.clear();
      return;
    }
    this.hashes.copyWithin(at, at + 1, this.length);
    this.length--;
  }

  /** A route holding `id` came at `at`: the ones from there move down. */
  insertAt(at: number, id: string): void {
    if (at < 0 || at > this.length) {
      this.clear();
      return;
    }
    if (this.length === this.hashes.length) {
      const grown = new Int32Array(Math.max(16, this.length * 2));
      grown.set(this.hashes.subarray(0, this.length));
      this.hashes = grown;
    }
    this.hashes.copyWithin(at + 1, at, this.length);
    this.hashes[at] = idHash(id);
    this.length++;
  }

  /** The route at `at` now holds `id`. */
  setAt(at: number, id: string): void {
    if (at < 0 || at >= this.length) this.clear();
    else this.hashes[at] = idHash(id);
  }

  /** A change that does not fit what is known: no hints until the routes are next parsed or written. */
  private clear(): void {
    this.hashes = new Int32Array(0);
    this.length = 0;
  }
}

/** FNV-1a over the id's UTF-16 code units; 0 for a route without an id. */
function idHash(id: unknown): number {
  if (typeof id !== "string") return 0;
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
  return h | 0;
}
