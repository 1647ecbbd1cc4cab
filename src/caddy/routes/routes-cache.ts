import { deflateRawSync, inflateRawSync } from "node:zlib";
import { collectWhenIdle } from "../../util/idle-gc.js";
import { type RoutesState, routesStateFrom, routesStateOf } from "./caddy-routes.js";
import { goJson } from "./etag.js";
import type { RouteJson } from "./plan.js";

/**
 * How long routes parsed for the next change are kept after the last read; then only Caddy's text is,
 * compressed (a small fraction of the parsed routes, and quick to make), inflated and parsed again by the
 * next change (little beside what Caddy takes to apply a change to the same routes).
 */
export const PARSED_KEPT_MS = 10_000;

/** Text up to this size is kept as it is when the agent goes idle; compressing it would save little. */
const KEPT_PLAIN = 64 * 1024;

/**
 * The managed server's routes as the writer last knew them: parsed (a read, or a verified write), the
 * routes of a verified write whose ETag is still to be computed, Caddy's text read after a write (parsed
 * on an idle tick, so the answer does not wait for it), or that text compressed once the routes were kept
 * parsed `keptMs` without use. Dropped whenever it may be stale.
 */
export class RoutesCache {
  private held:
    | RoutesState
    | { written: RouteJson[] }
    | { text: string; etag: string }
    | { deflated: Buffer; etag: string }
    | undefined;
  /**
   * The parsed routes held, to be put away (with Caddy's text of them, when they were read as text). One
   * timer for whatever is held then: a timer per parse would keep each parse's routes and text alive for
   * `keptMs` after the next replaced it (under steady changes, the text of every route per recent batch).
   */
  private parsedText: { state: RoutesState; text: string | undefined } | undefined;
  private putAway: NodeJS.Timeout | undefined;

  constructor(
    private readonly keptMs: number,
    /** Called with the routes each time they are parsed or written (their index says where each id is). */
    private readonly parsed: (state: RoutesState) => void,
    /** The ETag Caddy gives these routes (etag.ts). */
    private readonly etagOf: (routes: RouteJson[]) => string,
  ) {}

  drop(): void {
    this.hold(undefined);
  }

  set(state: RoutesState): void {
    this.hold(state);
  }

  /** Holds the routes Caddy verifiably holds after a write; their ETag is computed when they are next needed. */
  holdWritten(routes: RouteJson[]): void {
    this.hold({ written: routes });
  }

  /**
   * Holds Caddy's text of the routes read after a write. It is parsed once the event loop is idle, so the
   * next change does not wait for it (at the largest hosts the parse would lengthen an answer), and goes
   * back to its text, compressed, once kept `keptMs` without a change or read replacing it.
   */
  holdText(text: string, etag: string): void {
    const plain = { text, etag };
    this.hold(plain);
    setImmediate(() => {
      if (this.held !== plain) return;
      const parsed = this.state();
      if (parsed !== undefined) this.keepParsed(parsed, text);
    });
  }

  /** The routes held, parsing (and first inflating) held text, or computing a write's ETag, first. */
  state(): RoutesState | undefined {
    const c = this.held;
    if (c === undefined || "routes" in c) return c;
    if ("written" in c) {
      const state: RoutesState = {
        ...routesStateFrom(c.written, this.etagOf(c.written)),
        etagComputed: true,
      };
      this.hold(state);
      this.parsed(state);
      this.keepParsed(state, undefined);
      return state;
    }
    try {
      const text = "text" in c ? c.text : inflateRawSync(c.deflated).toString("utf8");
      const state = routesStateOf(text, c.etag);
      this.hold(state);
      this.parsed(state);
      return state;
    } catch {
      // Text that is not a routes array (parsed on an idle tick, where a throw would stop the agent): no
      // cache, so the next change reads Caddy afresh and meets any real problem there.
      this.hold(undefined);
      return undefined;
    }
  }

  /** Holds `value`, letting go of the text of parsed routes it replaces. */
  private hold(value: RoutesCache["held"]): void {
    this.held = value;
    if (this.parsedText !== undefined && this.parsedText.state !== value) this.parsedText = undefined;
  }

  /**
   * Keeps `state` parsed for `keptMs`, then, unless replaced meanwhile, only its text (`text`, else made from
   * the routes), compressed.
   */
  private keepParsed(state: RoutesState, text: string | undefined): void {
    this.parsedText = { state, text };
    if (this.putAway) this.putAway.refresh();
    else this.putAway = setTimeout(() => this.putAwayParsed(), this.keptMs).unref();
  }

  private putAwayParsed(): void {
    this.putAway = undefined;
    const kept = this.parsedText;
    // Set only while its routes are held (`hold` lets go of it when anything replaces them).
    if (kept === undefined) return;
    this.parsedText = undefined;
    const state = kept.state;
    const text = kept.text ?? goJson(state.routes);
    this.hold(
      text.length <= KEPT_PLAIN
        ? { text, etag: state.etag }
        : { deflated: deflateRawSync(text, { level: 1 }), etag: state.etag },
    );
    collectWhenIdle();
  }
}
