import { absoluteUrl, carriesCredentials } from "../../util/urls.js";
/**
 * Where operator releases come from. A source is a prefix under which each release is a folder
 * `<source>/<version>/` holding the executable and `SHA256SUMS`. Three forms: an `https://` prefix, an
 * `s3://bucket/prefix` (mapped onto the configured endpoint), or an https URL on the object-storage endpoint
 * itself (`https://<endpoint>/<bucket>/<prefix>` or `https://<bucket>.<endpoint host>/<prefix>`).
 * Requests to the object-storage endpoint are SigV4-signed when the `AWS_*` credentials are set; the
 * credentials are never sent to any other host.
 */
export interface SourceOptions {
  allowHttp: boolean;
  s3Endpoint: string | undefined;
  s3Region: string | undefined;
  s3PathStyle: boolean;
  /** Where `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` and `AWS_REGION` are read. */
  env: NodeJS.ProcessEnv;
}

const BUCKET_RE = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/** What is wrong with a source string, or undefined when it can be used. */
export function sourceProblem(raw: string, allowHttp: boolean): string | undefined {
  const url = absoluteUrl(raw);
  if (!url) return "must be an https:// prefix or an s3://bucket/prefix URL";
  if (carriesCredentials(url)) return "must not carry credentials";
  if (url.search || url.hash) return "must not carry a query or fragment";
  if (url.protocol === "s3:")
    return BUCKET_RE.test(url.hostname) ? undefined : `names an invalid bucket "${url.hostname}"`;
  if (url.protocol === "https:") return undefined;
  if (url.protocol === "http:")
    return allowHttp ? undefined : "must use https (plain http is not allowed by the configuration)";
  return "must be an https:// prefix or an s3://bucket/prefix URL";
}

const trimSlashes = (s: string) => s.replace(/^\/+|\/+$/g, "");

export class ArtifactSource {
  readonly region: string;
  readonly endpoint: URL;

  constructor(private readonly o: SourceOptions) {
    this.region = o.s3Region ?? o.env.AWS_REGION ?? o.env.AWS_DEFAULT_REGION ?? "us-east-1";
    this.endpoint = new URL(o.s3Endpoint ?? `https://s3.${this.region}.amazonaws.com`);
  }

  /**
   * The URL of `<source>/<version>/<file>` (of `<source>/<file>` for an empty version: a package's own
   * folder); `source` has passed `sourceProblem`.
   */
  locate(source: string, version: string, file: string): URL {
    const url = new URL(source);
    const tail = `${version === "" ? "" : `${encodeURIComponent(version)}/`}${encodeURIComponent(file)}`;
    if (url.protocol !== "s3:") return new URL(`${source.replace(/\/+$/, "")}/${tail}`);
    const prefix = trimSlashes(url.pathname);
    const key = prefix ? `${prefix}/${tail}` : tail;
    const base = trimSlashes(this.endpoint.pathname);
    const root = `${this.endpoint.protocol}//${this.o.s3PathStyle ? this.endpoint.host : `${url.hostname}.${this.endpoint.host}`}`;
    const path = [base, this.o.s3PathStyle ? url.hostname : "", key].filter((p) => p !== "").join("/");
    return new URL(`${root}/${path}`);
  }

  /** Whether a URL may be fetched at all (the http rule applies to mapped s3:// URLs too). */
  schemeProblem(url: URL): string | undefined {
    if (url.protocol === "https:") return undefined;
    if (url.protocol === "http:" && this.o.allowHttp) return undefined;
    return `${url.origin} is not https and plain http is not allowed by the configuration`;
  }

  private onEndpoint(url: URL): boolean {
    const e = this.endpoint;
    if (url.protocol !== e.protocol || url.port !== e.port) return false;
    return url.hostname === e.hostname || url.hostname.endsWith(`.${e.hostname}`);
  }

  /** Request headers for a GET of `url`: `extra`, plus a SigV4 signature when `url` is on the endpoint. */
  async headers(url: URL, extra: Record<string, string>): Promise<Record<string, string>> {
    const { AWS_ACCESS_KEY_ID: accessKeyId, AWS_SECRET_ACCESS_KEY: secretAccessKey } = this.o.env;
    if (!accessKeyId || !secretAccessKey || !this.onEndpoint(url)) return extra;
    // Loaded on the first signed request: hosts that never use object storage do not carry it.
    const { AwsV4Signer } = await import("aws4fetch");
    const signer = new AwsV4Signer({
      method: "GET",
      url: url.toString(),
      headers: extra,
      accessKeyId,
      secretAccessKey,
      ...(this.o.env.AWS_SESSION_TOKEN ? { sessionToken: this.o.env.AWS_SESSION_TOKEN } : {}),
      service: "s3",
      region: this.region,
    });
    const signed = await signer.sign();
    return Object.fromEntries(signed.headers.entries());
  }
}
