import { Readable } from "node:stream";
import { CHUNK_BYTES, encodeFrame, type Frame, INITIAL_WINDOW, type StreamFrame } from "./protocol.js";

/** Where a stream's frames go: one connection's send, with a wait while its socket's buffer is full. */
export interface FrameSink {
  send(header: StreamFrame, body?: Uint8Array): void;
  /** Resolves once the connection's outgoing buffer is below its mark, or it closed. */
  drained(): Promise<void>;
  readonly open: boolean;
}

/**
 * Sends one body as `data` frames of at most CHUNK_BYTES, never more than the peer granted: each stream
 * starts with INITIAL_WINDOW bytes of credit and the peer's `win` frames add to it as it reads. `end`
 * closes the body; a stopped sender (cancel, or the connection gone) sends nothing more.
 */
export class OutgoingBody {
  private credit = INITIAL_WINDOW;
  private wake: (() => void) | undefined;
  private stopped = false;

  constructor(
    private readonly id: string,
    private readonly sink: FrameSink,
  ) {}

  grant(bytes: number): void {
    if (Number.isFinite(bytes) && bytes > 0) this.credit += bytes;
    this.wake?.();
  }

  stop(): void {
    this.stopped = true;
    this.wake?.();
  }

  /** Sends every chunk of `source` then `end`; resolves false when stopped before the end. */
  async pump(source: AsyncIterable<Uint8Array | string> | Iterable<Uint8Array | string>): Promise<boolean> {
    for await (const piece of source) {
      const chunk = typeof piece === "string" ? Buffer.from(piece) : piece;
      let offset = 0;
      while (offset < chunk.length) {
        if (this.stopped || !this.sink.open) return false;
        if (this.credit <= 0) {
          await new Promise<void>((resolve) => {
            this.wake = resolve;
          });
          this.wake = undefined;
          continue;
        }
        await this.sink.drained();
        const n = Math.min(CHUNK_BYTES, this.credit, chunk.length - offset);
        this.sink.send({ t: "data", id: this.id }, chunk.subarray(offset, offset + n));
        this.credit -= n;
        offset += n;
      }
    }
    if (this.stopped || !this.sink.open) return false;
    this.sink.send({ t: "end", id: this.id });
    return true;
  }
}

/**
 * The credit of a body arriving: the sender may have INITIAL_WINDOW bytes unread here at most, and credit
 * goes back in `win` frames as the reader takes bytes out, a quarter window at a time.
 */
class ReceiveWindow {
  private received = 0;
  private granted = INITIAL_WINDOW;

  constructor(
    private readonly id: string,
    private readonly sink: FrameSink,
  ) {}

  /** Counts a data frame's bytes; false when the sender overran its credit (a protocol error). */
  take(bytes: number): boolean {
    this.received += bytes;
    return this.received <= this.granted;
  }

  /** Gives back the credit of what the reader took, `unread` bytes still waiting for it. */
  giveBack(unread: number): void {
    const target = this.received - unread + INITIAL_WINDOW;
    if (target - this.granted < INITIAL_WINDOW / 4 || !this.sink.open) return;
    this.sink.send({ t: "win", id: this.id, bytes: target - this.granted });
    this.granted = target;
  }
}

/** A body arriving in `data` frames, as a Readable (the agent's requests' bodies). */
export class IncomingBody extends Readable {
  private readonly window: ReceiveWindow;

  constructor(id: string, sink: FrameSink) {
    super({ highWaterMark: INITIAL_WINDOW });
    this.window = new ReceiveWindow(id, sink);
  }

  /** A data frame's bytes; false when the sender overran its credit (a protocol error). */
  add(bytes: Buffer): boolean {
    if (!this.window.take(bytes.length)) return false;
    // The frame's own bytes: the WebSocket message they came in is not reused.
    this.push(bytes);
    return true;
  }

  finish(): void {
    this.push(null);
  }

  override _read(): void {
    this.window.giveBack(this.readableLength);
  }
}

/** A body this large is sent as a fragment of its own rather than copied behind its head. */
const SPLIT_BYTES = 16 * 1024;

/** Bytes queued on a socket past which streams wait before sending more. */
const HIGH_WATER = 4 * 1024 * 1024;

/** What FrameWriter gathers writes on: the WebSocket's own socket (TLS, or TCP on loopback). */
export interface Corkable {
  cork(): void;
  uncork(): void;
}

/**
 * One side's writes of frames to its WebSocket, counting what is queued on the socket: `drained` waits
 * while more than HIGH_WATER is, so the streams of one connection cannot queue without bound. The frames
 * written in one turn of the event loop leave in one write to `socket` (corked until the next tick): a
 * frame is otherwise a write of its own, and each of its fragments too, and each write to a socket costs a
 * system call and, on the other side, a wake-up. The agent's list of 20,000 routes (7.6 MB) went out in
 * about 230 writes, 110 gathered; a 111 KB answer in 5, 3 gathered (its `end` comes a turn later).
 */
export class FrameWriter {
  private queued = 0;
  private readonly waiters: (() => void)[] = [];
  private corked = false;

  constructor(
    private readonly ws: {
      send(data: Uint8Array, options: { binary: true; fin: boolean }, done: () => void): void;
    },
    private readonly socket?: Corkable,
  ) {}

  /** Sends the frame; its size in bytes. A large body follows its head as a second fragment, uncopied. */
  write(header: Frame, body?: Uint8Array): number {
    this.gather();
    const whole = body === undefined || body.length < SPLIT_BYTES;
    const head = whole ? encodeFrame(header, body) : encodeFrame(header);
    const bytes = head.length + (whole ? 0 : (body?.length ?? 0));
    this.queued += bytes;
    const sent = () => {
      this.queued -= bytes;
      if (this.queued < HIGH_WATER) this.release();
    };
    if (whole) this.ws.send(head, { binary: true, fin: true }, sent);
    else {
      // Nothing else is sent between the two: one message, whose fragments ws writes in order.
      this.ws.send(head, { binary: true, fin: false }, () => {});
      this.ws.send(body as Uint8Array, { binary: true, fin: true }, sent);
    }
    return bytes;
  }

  /** Holds this turn's writes on the socket until the next tick, once per turn. */
  private gather(): void {
    const socket = this.socket;
    if (socket === undefined || this.corked) return;
    this.corked = true;
    socket.cork();
    process.nextTick(() => {
      this.corked = false;
      socket.uncork();
    });
  }

  drained(open: boolean): Promise<void> {
    if (this.queued < HIGH_WATER || !open) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Wakes every stream waiting (the buffer emptied, or the connection closed). */
  release(): void {
    for (const w of this.waiters.splice(0)) w();
  }
}

/**
 * A body arriving in `data` frames, as a web ReadableStream (the control plane's `Response` bodies), with
 * the same credit as IncomingBody. Built on the stream's own queue: no Node stream in between.
 */
export class IncomingWebBody {
  readonly stream: ReadableStream<Uint8Array>;
  private controller!: ReadableStreamDefaultController<Uint8Array>;
  private readonly window: ReceiveWindow;
  private closed = false;

  constructor(
    private readonly id: string,
    private readonly sink: FrameSink,
  ) {
    this.window = new ReceiveWindow(id, sink);
    this.stream = new ReadableStream<Uint8Array>(
      {
        start: (c) => {
          this.controller = c;
        },
        // What the stream's queue does not hold, the reader took.
        pull: () => {
          if (!this.closed) this.window.giveBack(INITIAL_WINDOW - (this.controller.desiredSize ?? 0));
        },
        cancel: () => {
          this.closed = true;
          if (this.sink.open) this.sink.send({ t: "cancel", id: this.id });
        },
      },
      new ByteLengthQueuingStrategy({ highWaterMark: INITIAL_WINDOW }),
    );
  }

  /** A data frame's bytes; false when the sender overran its credit. */
  add(bytes: Buffer): boolean {
    if (!this.window.take(bytes.length)) return false;
    if (!this.closed) this.controller.enqueue(bytes);
    return true;
  }

  finish(): void {
    if (this.closed) return;
    this.closed = true;
    this.controller.close();
  }

  destroy(err: Error): void {
    if (this.closed) return;
    this.closed = true;
    this.controller.error(err);
  }
}
