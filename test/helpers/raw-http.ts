import { connect } from "node:net";

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Sends `bytes` as they are over a fresh loopback connection and reads one response until the server
 * closes or the response's Content-Length is in. No client library touches the request line, so a test can
 * send spellings (`/%76%31/...`, `//v1/...`) and framing (bad lengths, bad chunks) a library would fix.
 */
export function rawRequest(port: number, bytes: string | Buffer, timeoutMs = 10_000): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port });
    const chunks: Buffer[] = [];
    let settled = false;
    const finish = (err?: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if (err) return reject(err);
      const parsed = parseResponse(Buffer.concat(chunks));
      if (parsed) resolve(parsed);
      else
        reject(new Error(`no complete HTTP response: ${JSON.stringify(Buffer.concat(chunks).toString())}`));
    };
    const timer = setTimeout(() => finish(new Error(`no response within ${timeoutMs} ms`)), timeoutMs);
    socket.on("data", (c: Buffer) => {
      chunks.push(c);
      const parsed = parseResponse(Buffer.concat(chunks));
      if (parsed?.complete) finish();
    });
    socket.on("end", () => finish());
    socket.on("close", () => finish());
    // A server may answer and close before it has read everything we sent: that is an answer, not an error.
    socket.on("error", (err: NodeJS.ErrnoException) =>
      chunks.length > 0 || err.code === "EPIPE" || err.code === "ECONNRESET" ? finish() : finish(err),
    );
    socket.write(bytes);
  });
}

function parseResponse(buf: Buffer): (RawResponse & { complete: boolean }) | undefined {
  const end = buf.indexOf("\r\n\r\n");
  if (end < 0) return undefined;
  const [statusLine = "", ...lines] = buf.subarray(0, end).toString("latin1").split("\r\n");
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine);
  if (!m) return undefined;
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const i = line.indexOf(":");
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const body = buf.subarray(end + 4);
  const length = headers["content-length"] === undefined ? undefined : Number(headers["content-length"]);
  const complete = length !== undefined && body.length >= length;
  return {
    status: Number(m[1]),
    headers,
    body: body.subarray(0, length ?? body.length).toString("utf8"),
    complete,
  };
}

/** A request head and optional body, with `Connection: close` so the answer ends the exchange. */
export function requestText(
  method: string,
  path: string,
  opts: { headers?: Record<string, string>; body?: string } = {},
): string {
  const headers: Record<string, string> = { host: "127.0.0.1", connection: "close", ...opts.headers };
  if (opts.body !== undefined && headers["content-length"] === undefined)
    headers["content-length"] = String(Buffer.byteLength(opts.body));
  const head = Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("");
  return `${method} ${path} HTTP/1.1\r\n${head}\r\n${opts.body ?? ""}`;
}
