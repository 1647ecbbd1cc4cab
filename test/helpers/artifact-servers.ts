import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import type http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";

type After = { after: (fn: () => unknown) => void };

/**
 * A file a server hands out. `truncate`: every response breaks off halfway (the socket is closed);
 * `truncate-once`: only the first one does. Both servers answer `Range: bytes=N-` (with `If-Range`) with 206.
 */
export interface HostedFile {
  body: Buffer;
  behaviour?: "ok" | "truncate" | "truncate-once";
  /** Responses served so far. */
  served?: number;
}

export interface SeenRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  status: number;
}

function serveBytes(req: http.IncomingMessage, res: http.ServerResponse, file: HostedFile): number {
  const body = file.body;
  const etag = `"${createHash("sha256").update(body).digest("hex").slice(0, 16)}"`;
  const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
  const ifRange = req.headers["if-range"];
  const start =
    range && (ifRange === undefined || ifRange === etag) && Number(range[1]) < body.length
      ? Number(range[1])
      : 0;
  const served = file.served ?? 0;
  file.served = served + 1;
  const headers: http.OutgoingHttpHeaders = {
    "accept-ranges": "bytes",
    etag,
    "content-type": "application/octet-stream",
    "content-length": body.length - start,
  };
  const status = start > 0 ? 206 : 200;
  if (start > 0) headers["content-range"] = `bytes ${start}-${body.length - 1}/${body.length}`;
  res.writeHead(status, headers);
  const rest = body.subarray(start);
  const truncate = file.behaviour === "truncate" || (file.behaviour === "truncate-once" && served === 0);
  if (req.method === "HEAD") res.end();
  else if (truncate) {
    // Ending the socket (not destroying it) lets the written half reach the client before the connection closes.
    res.write(rest.subarray(0, Math.floor(rest.length / 2)));
    res.socket?.end();
  } else res.end(rest);
  return status;
}

async function listen(t: After, tls: { key: string; cert: string }, handler: http.RequestListener) {
  const server = https.createServer({ key: tls.key, cert: tls.cert }, handler);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.after(
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );
  return (server.address() as AddressInfo).port;
}

/** A loopback HTTPS server handing out `files` by path (`/prefix/1.0/operator`); 404 for anything else. */
export async function startArtifactServer(
  t: After,
  tls: { key: string; cert: string },
): Promise<{ url: string; files: Map<string, HostedFile>; requests: SeenRequest[] }> {
  const files = new Map<string, HostedFile>();
  const requests: SeenRequest[] = [];
  const port = await listen(t, tls, (req, res) => {
    req.resume();
    const path = (req.url ?? "/").split("?")[0] as string;
    const file = files.get(path);
    const status = file ? serveBytes(req, res, file) : 404;
    if (!file) res.writeHead(404).end("not found");
    requests.push({ method: req.method ?? "", path, headers: req.headers, status });
  });
  return { url: `https://127.0.0.1:${port}`, files, requests };
}

const rfc3986 = (s: string) =>
  encodeURIComponent(decodeURIComponent(s)).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
const hmac = (key: string | Buffer, data: string) => createHmac("sha256", key).update(data).digest();

export interface S3Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
}

/**
 * Re-computes an AWS Signature Version 4 of a request from what arrived (independently of the agent's
 * signer); returns why it does not hold, or undefined.
 */
export function sigV4Problem(req: http.IncomingMessage, creds: S3Credentials): string | undefined {
  const auth = req.headers.authorization;
  if (!auth) return "the request is not signed";
  const m =
    /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/.exec(
      auth,
    );
  if (!m) return "malformed Authorization header";
  const [, keyId, date = "", region = "", service, signedHeaders = "", signature = ""] = m;
  if (keyId !== creds.accessKeyId) return "unknown access key";
  if (region !== creds.region || service !== "s3") return "wrong credential scope";
  const amzDate = req.headers["x-amz-date"];
  if (typeof amzDate !== "string" || !amzDate.startsWith(date))
    return "x-amz-date missing or outside the scope";
  const names = signedHeaders.split(";");
  if (!names.includes("host") || !names.includes("x-amz-date")) return "host and x-amz-date must be signed";
  const payloadHash = req.headers["x-amz-content-sha256"];
  if (typeof payloadHash !== "string") return "x-amz-content-sha256 missing";
  const [rawPath = "/", rawQuery = ""] = (req.url ?? "/").split("?");
  const canonicalUri = rawPath.split("/").map(rfc3986).join("/");
  const canonicalQuery = rawQuery
    .split("&")
    .filter((p) => p !== "")
    .map((p) => p.split("=").map((x) => rfc3986(x ?? "")))
    .sort(([a = ""], [b = ""]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k = "", v = ""]) => `${k}=${v}`)
    .join("&");
  const canonicalHeaders = names
    .map(
      (n) =>
        `${n}:${String(req.headers[n] ?? "")
          .trim()
          .replace(/\s+/g, " ")}\n`,
    )
    .join("");
  const canonicalRequest = [
    req.method,
    canonicalUri,
    canonicalQuery,
    canonicalHeaders,
    signedHeaders,
    payloadHash,
  ].join("\n");
  const stringToSign = [
    "AWS4-HMAC-SHA256",
    amzDate,
    `${date}/${region}/s3/aws4_request`,
    createHash("sha256").update(canonicalRequest).digest("hex"),
  ].join("\n");
  let key = hmac(`AWS4${creds.secretAccessKey}`, date);
  for (const part of [region, "s3", "aws4_request"]) key = hmac(key, part);
  const expected = Buffer.from(hmac(key, stringToSign).toString("hex"));
  const got = Buffer.from(signature);
  return got.length === expected.length && timingSafeEqual(got, expected) ? undefined : "signature mismatch";
}

/**
 * A loopback, path-style, read-only S3-compatible server over HTTPS that verifies SigV4 on every request
 * and answers 403 when it does not hold. Objects are keyed `bucket/key`.
 */
export async function startS3Server(
  t: After,
  tls: { key: string; cert: string },
  creds: S3Credentials,
): Promise<{ endpoint: string; objects: Map<string, HostedFile>; requests: SeenRequest[] }> {
  const objects = new Map<string, HostedFile>();
  const requests: SeenRequest[] = [];
  const port = await listen(t, tls, (req, res) => {
    req.resume();
    const path = (req.url ?? "/").split("?")[0] as string;
    const problem = sigV4Problem(req, creds);
    let status: number;
    if (problem) {
      status = 403;
      res
        .writeHead(403, { "content-type": "application/xml" })
        .end(`<Error><Code>SignatureDoesNotMatch</Code><Message>${problem}</Message></Error>`);
    } else {
      const object = objects.get(decodeURIComponent(path.slice(1)));
      status = object ? serveBytes(req, res, object) : 404;
      if (!object)
        res
          .writeHead(404, { "content-type": "application/xml" })
          .end("<Error><Code>NoSuchKey</Code></Error>");
    }
    requests.push({ method: req.method ?? "", path, headers: req.headers, status });
  });
  return { endpoint: `https://127.0.0.1:${port}`, objects, requests };
}
