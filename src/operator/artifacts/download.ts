import { createHash } from "node:crypto";
import https from "node:https";
import { rootCertificates } from "node:tls";
import type { IncomingHttpHeaders, IncomingMessage } from "../../util/node-builtins.js";
import { fs, http } from "../../util/node-builtins.js";
import { doubling, retried } from "../../util/retry.js";
import { UpdateFailure } from "../failure.js";
import type { ArtifactSource } from "./source.js";

const { closeSync, createReadStream, fsyncSync, ftruncateSync, openSync, writeSync } = fs;

export interface DownloaderOptions {
  source: ArtifactSource;
  /** Extra trusted CAs (PEM), added to Node's bundled ones; undefined keeps Node's defaults. */
  extraCa: string | undefined;
  maxBytes: number;
  idleTimeoutMs: number;
  totalTimeoutMs: number;
  retries: number;
  retryDelayMs: number;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const MAX_REDIRECTS = 5;

function statusFailure(status: number, url: URL): UpdateFailure {
  const where = `${url.origin}${url.pathname}`;
  if (status === 401 || status === 403)
    return new UpdateFailure("source_denied", `${where} answered ${status}: access denied`);
  if (status === 404) return new UpdateFailure("artifact_not_found", `${where} answered 404`);
  const retryable = status === 408 || status === 429 || status >= 500;
  return new UpdateFailure("download_failed", `${where} answered ${status}`, retryable);
}

/** A validator the server promises stays the same for the same bytes: a strong ETag, else Last-Modified. */
function strongValidator(headers: IncomingHttpHeaders): string | undefined {
  const etag = headers.etag;
  if (etag && !etag.startsWith("W/")) return etag;
  return headers["last-modified"];
}

/**
 * Fetches release files over HTTPS (or signed object storage): bounded retries with doubling delays, an idle
 * time-out per attempt, one deadline for the whole download, a size cap, and resumption with `Range` and
 * `If-Range` where the server supports it. Redirects are followed (at most 5); each hop is checked against
 * the scheme rule and signed only when it is on the object-storage endpoint.
 */
export class Downloader {
  private readonly ca: string[] | undefined;

  constructor(private readonly o: DownloaderOptions) {
    this.ca = o.extraCa === undefined ? undefined : [...rootCertificates, o.extraCa];
  }

  /** A small text file (SHA256SUMS); undefined when the server says it does not exist. */
  async text(url: URL, maxBytes: number, closing: AbortSignal): Promise<string | undefined> {
    return (await this.small(url, maxBytes, closing))?.toString("utf8");
  }

  /**
   * A small file's bytes (a signature, or the SHA256SUMS it signs, byte for byte); undefined when the server
   * answers one of `absent` (404; object storage answers a missing key with 403 to whom may not list).
   */
  async small(
    url: URL,
    maxBytes: number,
    closing: AbortSignal,
    absent: readonly number[] = [404],
  ): Promise<Buffer | undefined> {
    return this.retrying(closing, async (signal) => {
      const res = await this.open(url, {}, signal);
      if (absent.includes(res.statusCode ?? 0)) {
        res.resume();
        return undefined;
      }
      if (res.statusCode !== 200) {
        res.resume();
        throw statusFailure(res.statusCode ?? 0, url);
      }
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of res as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > maxBytes) {
          res.destroy();
          throw new UpdateFailure("download_failed", `${url.pathname} is larger than ${maxBytes} bytes`);
        }
        chunks.push(chunk);
      }
      return Buffer.concat(chunks);
    });
  }

  /** Downloads `url` into `dest` (created or truncated), fsynced; `progress` sees the bytes as they arrive. */
  async toFile(
    url: URL,
    dest: string,
    progress: (done: number, total: number | undefined) => void,
    closing: AbortSignal,
  ): Promise<void> {
    const fd = openSync(dest, "w", 0o600);
    const at = { done: 0 };
    let total: number | undefined;
    let validator: string | undefined;
    try {
      await this.retrying(closing, async (signal) => {
        const resume = at.done > 0 && validator !== undefined;
        const res = await this.open(
          url,
          resume ? { range: `bytes=${at.done}-`, "if-range": validator as string } : {},
          signal,
        );
        if (res.statusCode === 206 && resume) {
          const m = /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(res.headers["content-range"] ?? "");
          if (!m || Number(m[1]) !== at.done) {
            res.destroy();
            validator = undefined;
            throw new UpdateFailure("download_failed", "the server resumed at the wrong offset", true);
          }
          if (m[2] !== "*") total = Number(m[2]);
        } else if (res.statusCode === 200) {
          at.done = 0;
          ftruncateSync(fd, 0);
          const length = res.headers["content-length"];
          total = length === undefined ? undefined : Number(length);
          validator = res.headers["accept-ranges"] === "bytes" ? strongValidator(res.headers) : undefined;
        } else {
          res.resume();
          throw statusFailure(res.statusCode ?? 0, url);
        }
        if (total !== undefined && total > this.o.maxBytes) {
          res.destroy();
          throw this.tooLarge(total);
        }
        progress(at.done, total);
        await this.receive(res, fd, at, (done) => progress(done, total));
        if (total !== undefined && at.done !== total)
          throw new UpdateFailure(
            "download_failed",
            `the download ended after ${at.done} of ${total} bytes`,
            true,
          );
      });
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }

  /**
   * Writes the body to `fd` from `at.done` on, as each chunk arrives. The writes are synchronous so that
   * every byte received is on file when the body breaks off (an async iterator would drop what it buffered),
   * which keeps the resume offset exact; a chunk is at most 64 KiB, written to the page cache.
   */
  private receive(
    res: IncomingMessage,
    fd: number,
    at: { done: number },
    progress: (done: number) => void,
  ): Promise<void> {
    return new Promise((resolve, reject) => {
      res.on("data", (chunk: Buffer) => {
        if (at.done + chunk.length > this.o.maxBytes)
          return res.destroy(this.tooLarge(at.done + chunk.length));
        try {
          writeSync(fd, chunk, 0, chunk.length, at.done);
        } catch (err) {
          return res.destroy(err as Error);
        }
        at.done += chunk.length;
        progress(at.done);
      });
      res.once("end", resolve);
      res.once("close", () => {
        if (!res.complete)
          reject(new UpdateFailure("download_failed", `the download broke off after ${at.done} bytes`, true));
      });
      res.once("error", (err) =>
        reject(
          err instanceof UpdateFailure
            ? err
            : new UpdateFailure(
                "download_failed",
                `the download broke off after ${at.done} bytes: ${err.message}`,
                true,
              ),
        ),
      );
    });
  }

  private tooLarge(bytes: number): UpdateFailure {
    return new UpdateFailure(
      "artifact_too_large",
      `the artifact has ${bytes} bytes or more; the limit is ${this.o.maxBytes}`,
    );
  }

  /**
   * Runs `attempt` until it succeeds, fails for good, or runs out of retries or time, with doubling waits
   * between attempts. `closing` aborts everything (the agent is stopping); the deadline turns into a
   * download failure.
   */
  private async retrying<T>(closing: AbortSignal, attempt: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const deadline = AbortSignal.timeout(this.o.totalTimeoutMs);
    const signal = AbortSignal.any([closing, deadline]);
    try {
      return await retried(
        () =>
          attempt(signal).catch((err: unknown) => {
            throw this.failureOf(err, closing, deadline);
          }),
        {
          attempts: this.o.retries + 1,
          delayMs: doubling(this.o.retryDelayMs),
          retryable: (err) => err instanceof UpdateFailure && err.retryable,
          signal,
        },
      );
    } catch (err) {
      throw closing.aborted ? closing.reason : err;
    }
  }

  /** What a failed attempt is: the stop of the agent, the deadline, or a download failure (retryable or not). */
  private failureOf(err: unknown, closing: AbortSignal, deadline: AbortSignal): unknown {
    if (closing.aborted) return closing.reason;
    if (deadline.aborted)
      return new UpdateFailure("download_failed", `no complete download within ${this.o.totalTimeoutMs} ms`);
    return err instanceof UpdateFailure
      ? err
      : new UpdateFailure("download_failed", (err as Error).message || String(err), true);
  }

  /** A GET following redirects; answers any final status to the caller. */
  private async open(
    start: URL,
    extra: Record<string, string>,
    signal: AbortSignal,
  ): Promise<IncomingMessage> {
    let url = start;
    for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
      const problem = this.o.source.schemeProblem(url);
      if (problem) throw new UpdateFailure("download_failed", problem);
      const res = await this.get(url, await this.o.source.headers(url, extra), signal);
      const location = res.headers.location;
      if (!REDIRECTS.has(res.statusCode ?? 0) || !location) return res;
      res.resume();
      url = new URL(location, url);
    }
    throw new UpdateFailure("download_failed", `more than ${MAX_REDIRECTS} redirects from ${start.origin}`);
  }

  private get(url: URL, headers: Record<string, string>, signal: AbortSignal): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      const options = { method: "GET", headers, agent: false as const, signal };
      const req =
        url.protocol === "https:"
          ? https.request(url, this.ca ? { ...options, ca: this.ca } : options)
          : http.request(url, options);
      req.setTimeout(this.o.idleTimeoutMs, () =>
        req.destroy(new Error(`nothing received from ${url.origin} for ${this.o.idleTimeoutMs} ms`)),
      );
      req.once("response", resolve);
      req.once("error", reject);
      req.end();
    });
  }
}

/** Digests of a file, each algorithm (a `crypto.createHash` name) over one read of it. */
export async function hashFile<A extends string>(
  path: string,
  algorithms: readonly A[],
): Promise<Record<A, Buffer>> {
  const hashes = algorithms.map((a) => createHash(a));
  for await (const chunk of createReadStream(path)) for (const h of hashes) h.update(chunk as Buffer);
  return Object.fromEntries(algorithms.map((a, i) => [a, hashes[i]?.digest()])) as Record<A, Buffer>;
}

/** The sha256 listed for `name` in a SHA256SUMS text (`<hex>  <name>` or `<hex> *<name>` lines). */
export function checksumFor(sums: string, name: string): string | undefined {
  for (const line of sums.split(/\r?\n/)) {
    const m = /^([0-9a-fA-F]{64}) [ *](?:\.\/)?(.+)$/.exec(line.trim());
    if (m?.[2] === name) return m[1]?.toLowerCase();
  }
  return undefined;
}
