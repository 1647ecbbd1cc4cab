import { createConnection, Socket } from "node:net";
import { basename, dirname } from "node:path";
import { pipeline, Readable } from "node:stream";
import {
  type CaddyErrorReason,
  type CaddyRequestOutcome,
  type Metrics,
  secondsSince,
} from "../metrics/metrics.js";
import { collectWhenIdle } from "../util/idle-gc.js";
import type {
  ClientRequest,
  IncomingHttpHeaders,
  IncomingMessage,
  RequestOptions,
} from "../util/node-builtins.js";
import { http } from "../util/node-builtins.js";
import { SharedFolder, UnsafePathError } from "../util/shared-folder.js";
import { neverSent, retriedAcrossReload } from "./retry.js";
import type { CaddyAdminAddress } from "./settings.js";

/**
 * Connections to the admin socket: Caddy's folder (`/run/hostkeeper-caddy` for the packaged Caddy) is Caddy's
 * user's, who could put a link to another daemon's socket in its place, and the agent, as root, would send
 * it the routes. Each connection opens the socket file through SharedFolder (a link, anything but a socket,
 * another user's socket is refused) and connects through the descriptor of that very file.
 */
function unixConnection(socketPath: string): () => Socket {
  return () => {
    let held: { path: string; close: () => void };
    try {
      held = SharedFolder.with(dirname(socketPath), {}, (folder) => folder.socket(basename(socketPath)));
    } catch (err) {
      // No socket file (Caddy between two admin servers): nothing was sent, as when a connect fails.
      if (!(err instanceof UnsafePathError)) (err as NodeJS.ErrnoException).syscall = "connect";
      const refused = new Socket();
      process.nextTick(() => refused.destroy(err as Error));
      return refused;
    }
    const socket = createConnection({ path: held.path });
    socket.once("connect", held.close).once("close", held.close);
    return socket;
  };
}

/** What a request body is written in at most, but for one piece longer than it. */
const CHUNK = 64 * 1024;

/**
 * A request body of JSON text given as pieces (`goJsonPieces`), sent as it is (not through JSON.stringify)
 * in chunks of about CHUNK bytes as the connection takes them: a batch of all routes of a large host is never
 * held as one string and a Buffer copy of it. `pieces` is called for each attempt and its length, and must
 * give the same text each time.
 */
export class JsonPieces {
  constructor(private readonly pieces: () => Iterable<string>) {}

  byteLength(): number {
    let n = 0;
    for (const p of this.pieces()) n += Buffer.byteLength(p);
    return n;
  }

  /** Writes the text to `req` and ends it; a request that fails stops it (the failure is the request's). */
  writeTo(req: ClientRequest): void {
    pipeline(Readable.from(chunks(this.pieces())), req, () => {});
  }
}

function* chunks(pieces: Iterable<string>): Generator<string, void, undefined> {
  let chunk = "";
  for (const p of pieces) {
    chunk += p;
    if (chunk.length >= CHUNK) {
      yield chunk;
      chunk = "";
    }
  }
  if (chunk !== "") yield chunk;
}

type Body = string | JsonPieces;

/** What one call may set for itself; the rest is the client's. */
export interface CallOptions {
  /** How long the call waits for Caddy, in ms; default the client's time-out. */
  timeoutMs?: number;
  /**
   * False: the call is left out of the agent's metrics, which count the requests made for the routes (the
   * probes, the status, the certificates and the embedded Caddy's set-up are not). Default true.
   */
  counted?: boolean;
}

/** A read's options: `attempts` bounds the tries across Caddy's admin restarts (READ_ATTEMPTS by default). */
export type ReadOptions = CallOptions & { attempts?: number };

/** One request's body and If-Match, besides its call options. */
type SentOptions = CallOptions & { body?: Body; ifMatch?: string };

/** Caddy's admin endpoint could not be reached or did not answer in time. */
export class CaddyUnavailableError extends Error {
  /** Why no answer came: no connection, no answer in time, or an answer broken off. */
  readonly reason: Exclude<CaddyErrorReason, "status">;

  constructor(
    message: string,
    options?: { cause?: unknown; reason?: Exclude<CaddyErrorReason, "status"> | undefined },
  ) {
    super(message, options);
    this.name = "CaddyUnavailableError";
    const code = (options?.cause as NodeJS.ErrnoException | undefined)?.code;
    this.reason = options?.reason ?? (code === "ETIMEDOUT" ? "timeout" : "unreachable");
  }
}

/** Caddy answered a request with an error status; `message` is Caddy's own `error` text. */
export class CaddyApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "CaddyApiError";
  }
}

export interface CaddyResponse {
  status: number;
  etag: string | undefined;
  text: string;
}

/** An answer whose body is read as it arrives (see `CaddyAdmin.stream`). */
export interface CaddyStream {
  status: number;
  etag: string | undefined;
  headers: IncomingHttpHeaders;
  body: IncomingMessage;
}

const outcomeOf = (status: number) =>
  `${Math.min(Math.max(Math.floor(status / 100), 2), 5)}xx` as CaddyRequestOutcome;

const etagOf = (res: IncomingMessage) => {
  const etag = res.headers.etag;
  return typeof etag === "string" ? etag : undefined;
};

const responseOf = (res: IncomingMessage, text: string): CaddyResponse => ({
  status: res.statusCode ?? 0,
  etag: etagOf(res),
  text,
});

/**
 * Attempts of a read that meets Caddy's admin endpoint restarting after a config change (the waits between
 * them double, caddy/retry.ts): enough for the restart on a busy host, which outlasted the waits of four.
 */
const READ_ATTEMPTS = 5;

const timeoutError = (ms: number) =>
  Object.assign(new Error(`no answer within ${ms} ms`), { code: "ETIMEDOUT" });

const brokenOff = (err: Error) =>
  new CaddyUnavailableError(`Caddy's admin API broke off its answer: ${err.message}`, {
    cause: err,
    reason: "aborted",
  });

/**
 * A request or answer this large (characters of text) leaves megabytes of garbage behind it (its text, what
 * was parsed from it, the buffers it passed through), which V8 collects only when code allocates again:
 * the agent asks for a collection once it goes quiet after one (util/idle-gc.ts). Without it, an agent on a
 * large host that rewrote every route at start and then had no request kept that garbage for good.
 */
const LARGE = 1 << 20;
const isLarge = (body: Body | undefined) =>
  body instanceof JsonPieces || (typeof body === "string" && body.length >= LARGE);

/**
 * A client for Caddy's admin API over TCP or a unix socket. Uses node:http rather than fetch: fetch sends
 * `Sec-Fetch-Mode`, which Caddy >= 2.11 answers with 403. No keep-alive: every config change restarts
 * the admin server, and a write on a reused, half-closed socket could not be told apart from a lost write.
 * A process builds one (server.ts, or the composition root when it is given none) and every part of the
 * agent shares it; a call that needs another time-out, or must not be counted, says so (CallOptions).
 */
export class CaddyAdmin {
  private readonly base: RequestOptions;
  /** Where each request's latency and each error is counted; unset for clients nobody scrapes. */
  private metrics: Metrics | undefined;

  constructor(
    readonly address: CaddyAdminAddress,
    /** Each call's time-out unless it sets its own. */
    private readonly timeoutMs: number,
  ) {
    this.base =
      address.kind === "unix"
        ? { createConnection: unixConnection(address.socketPath), headers: { host: "localhost" } }
        : { host: address.url.hostname, port: Number(address.url.port), headers: { host: address.url.host } };
  }

  /**
   * Counts this client's requests in `metrics` from now on: the process's client is built before the app
   * and its metrics (server.ts starts the embedded Caddy first), and the composition root hands them over.
   */
  countIn(metrics: Metrics): void {
    this.metrics = metrics;
  }

  /** One request. Throws CaddyUnavailableError when no answer came; returns any status Caddy answered. */
  raw(method: string, path: string, opts: SentOptions = {}): Promise<CaddyResponse> {
    return this.counted(
      method,
      opts,
      () => this.request(method, path, opts),
      (res) => res.status,
    );
  }

  /** The metrics a call is counted in; none for a call that asks not to be. */
  private metricsOf(call: CallOptions): Metrics | undefined {
    return call.counted === false ? undefined : this.metrics;
  }

  /** Runs one request, counting its latency by outcome and its error by reason. */
  private async counted<T>(
    method: string,
    call: CallOptions,
    run: () => Promise<T>,
    statusOf: (res: T) => number,
  ): Promise<T> {
    const metrics = this.metricsOf(call);
    const started = process.hrtime.bigint();
    const observe = (outcome: CaddyRequestOutcome) =>
      metrics?.caddyAdminDuration.observe({ method, outcome }, secondsSince(started));
    try {
      const res = await run();
      observe(outcomeOf(statusOf(res)));
      return res;
    } catch (err) {
      observe("error");
      const reason = err instanceof CaddyUnavailableError ? err.reason : "unreachable";
      metrics?.caddyAdminErrors.inc({ method, reason });
      throw err;
    }
  }

  private request(method: string, path: string, opts: SentOptions): Promise<CaddyResponse> {
    const timeoutMs = opts.timeoutMs ?? this.timeoutMs;
    return new Promise((resolve, reject) => {
      const req = this.send(method, path, opts, (err) => {
        clearTimeout(timer);
        reject(err);
      });
      const timer = setTimeout(() => req.destroy(timeoutError(timeoutMs)), timeoutMs);
      req.on("response", (res) => {
        // Decoded chunk by chunk into one string (V8 joins the pieces when it is parsed), rather than
        // joined into one Buffer first: at a large host that Buffer is megabytes of native memory per read,
        // which glibc keeps in the process after it is freed.
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => {
          text += c;
        });
        res.on("end", () => {
          clearTimeout(timer);
          if (text.length >= LARGE || isLarge(opts.body)) collectWhenIdle();
          resolve(responseOf(res, text));
        });
        res.on("error", (err) => {
          clearTimeout(timer);
          reject(brokenOff(err));
        });
      });
    });
  }

  /** Sends one request; `fail` gets the error when no answer came. Reading the answer is the caller's. */
  private send(
    method: string,
    path: string,
    opts: SentOptions,
    fail: (err: CaddyUnavailableError) => void,
  ): ClientRequest {
    const headers: Record<string, string> = { ...(this.base.headers as Record<string, string>) };
    const body = opts.body;
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      headers["content-length"] = String(
        typeof body === "string" ? Buffer.byteLength(body) : body.byteLength(),
      );
    }
    if (opts.ifMatch) headers["if-match"] = opts.ifMatch;
    // No agent: a socket of its own per request (with createConnection for the unix socket, which an agent would ignore).
    const req = http.request({
      ...this.base,
      method,
      path,
      headers,
      agent: this.base.createConnection ? undefined : false,
    });
    req.on("error", (err: NodeJS.ErrnoException) =>
      fail(
        // The address stays out of the message, which may reach a client; the start-up log names it.
        new CaddyUnavailableError(
          `Caddy's admin API is unreachable: ${err instanceof UnsafePathError ? err.withoutFolders() : (err.code ?? err.message)}`,
          { cause: err },
        ),
      ),
    );
    if (body instanceof JsonPieces) body.writeTo(req);
    else req.end(body);
    return req;
  }

  /**
   * A GET whose answer is handed over as it arrives rather than read whole: for answers too large to hold
   * (the routes of a big server). Retried like `read` until the answer's head arrives. The head must come
   * within the time-out; after it, the body may pause that long at most (the stream then fails).
   */
  stream(path: string, opts: ReadOptions = {}): Promise<CaddyStream> {
    const timeoutMs = opts.timeoutMs ?? this.timeoutMs;
    return retriedAcrossReload(opts.attempts ?? READ_ATTEMPTS, async () => {
      const res = await this.counted(
        "GET",
        opts,
        () =>
          new Promise<IncomingMessage>((resolve, reject) => {
            const req = this.send("GET", path, {}, reject);
            req.setTimeout(timeoutMs, () => req.destroy(timeoutError(timeoutMs)));
            req.on("response", resolve);
          }),
        (r) => r.statusCode ?? 0,
      );
      // Streamed answers are the large ones: what the reader made of them is garbage once they end.
      res.once("end", collectWhenIdle);
      return { status: res.statusCode ?? 0, etag: etagOf(res), headers: res.headers, body: res };
    });
  }

  /**
   * A read, retried a bounded number of times on connection errors: reads that land while Caddy restarts
   * its admin server after a config change see a reset.
   */
  read(path: string, opts: ReadOptions = {}): Promise<CaddyResponse> {
    const { attempts = READ_ATTEMPTS, ...call } = opts;
    return retriedAcrossReload(attempts, () => this.raw("GET", path, call));
  }

  /** The ETag the path an If-Match value names has now (Caddy's ETags are `"<path> <hash>"`). */
  private async etagNow(ifMatch: string, call: CallOptions): Promise<string | undefined> {
    const path = ifMatch.slice(1, -1).split(" ")[0] ?? "";
    return path.startsWith("/config/") ? (await this.read(path, call)).etag : undefined;
  }

  /**
   * A write; any non-2xx answer becomes a CaddyApiError carrying Caddy's message. Sent again when the
   * connection failed as Caddy restarted its admin server after a change (a write sent right behind another
   * can meet that) and the write provably did not land: the connection was never made, or the value its
   * If-Match names still has that ETag (Caddy checks it and changes the config under one lock).
   */
  async write(
    method: "POST" | "PUT" | "PATCH" | "DELETE",
    path: string,
    body?: unknown,
    ifMatch?: string,
    call: CallOptions = {},
  ): Promise<void> {
    const opts = {
      ...call,
      ...(body === undefined ? {} : { body: body instanceof JsonPieces ? body : JSON.stringify(body) }),
      ...(ifMatch ? { ifMatch } : {}),
    };
    const res = await retriedAcrossReload(
      READ_ATTEMPTS,
      () => this.raw(method, path, opts),
      async (err) =>
        neverSent(err) || (ifMatch !== undefined && (await this.etagNow(ifMatch, call)) === ifMatch),
    );
    if (res.status < 200 || res.status >= 300) {
      this.metricsOf(call)?.caddyAdminErrors.inc({ method, reason: "status" });
      throw new CaddyApiError(res.status, caddyErrorText(res));
    }
  }
}

export function caddyErrorText(res: CaddyResponse): string {
  try {
    const parsed = JSON.parse(res.text) as { error?: unknown };
    if (typeof parsed.error === "string") return parsed.error;
  } catch {
    // not JSON: fall through to the raw text
  }
  return res.text.trim().slice(0, 500) || `HTTP ${res.status}`;
}
