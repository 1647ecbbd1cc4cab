import { parse, setting } from "../config.js";
import { absoluteUrl, carriesCredentials } from "../util/urls.js";
import { parseTrustedKey, parseTrustedKeys, trustedKeyLines } from "./artifacts/minisign.js";
import { sourceProblem } from "./artifacts/source.js";

/** A URL setting: absolute http(s), without credentials, query or fragment; trailing slashes dropped. */
function baseUrl(raw: unknown): string | undefined {
  const s = parse.optionalString(raw);
  if (s === undefined) return undefined;
  const url = absoluteUrl(s);
  if (!url) throw new Error(`expected an absolute URL, got "${s}"`);
  if (carriesCredentials(url) || url.search || url.hash)
    throw new Error("must not carry credentials, a query or a fragment");
  return s.replace(/\/+$/, "");
}

/**
 * How a setting of minisign public keys reads and shows (the operator's trusted keys, the agent's update
 * keys): base64 key lines, `untrusted comment:` lines skipped, a list in the config file.
 */
export const minisignKeyList = {
  parse: (raw: unknown): string[] => {
    const text = Array.isArray(raw) ? raw.map(String).join("\n") : parse.string()(raw);
    const lines = trustedKeyLines(text);
    parseTrustedKeys(lines);
    return lines;
  },
  show: (lines: string[]): string =>
    lines.map((l) => `${l} (key id ${parseTrustedKey(l).id})`).join(", ") || "none",
};

export const operatorSettings = {
  ports: setting({
    key: "operatorPorts",
    env: "HOSTKEEPER_OPERATOR_PORTS",
    area: "operator",
    doc: "Two loopback ports, `blue,green`: each operator instance slot listens on its own (passed as `PORT`).",
    defaultText: "7101,7102",
    default: { blue: 7101, green: 7102 },
    parse: (raw) => {
      const ports = parse.list(raw).map((p) => parse.int(1, 65535)(p));
      const [blue, green] = ports;
      if (ports.length !== 2 || blue === undefined || green === undefined || blue === green)
        throw new Error("expected two different ports, `blue,green`");
      return { blue, green };
    },
    show: ({ blue, green }) => `${blue},${green}`,
  }),
  artifactName: setting({
    key: "operatorArtifactName",
    env: "HOSTKEEPER_OPERATOR_ARTIFACT_NAME",
    area: "operator",
    doc: "File name of the operator executable in a release: `<source>/<version>/<name>`.",
    defaultText: "operator",
    default: "operator",
    parse: (raw) => {
      const s = parse.string({ nonEmpty: true })(raw);
      if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(s))
        throw new Error(`"${s}" is not a plain file name (letters, digits, . _ -)`);
      return s;
    },
  }),
  healthPath: setting({
    key: "operatorHealthPath",
    env: "HOSTKEEPER_OPERATOR_HEALTH_PATH",
    area: "operator",
    doc: "Path of the operator's health endpoint; an instance is healthy when `GET http://127.0.0.1:<port><path>` answers 2xx.",
    defaultText: "/health",
    default: "/health",
    parse: (raw) => {
      const s = parse.string({ nonEmpty: true })(raw);
      if (!/^\/[\x21-\x7e]*$/.test(s)) throw new Error(`must be a path starting with /, got "${s}"`);
      return s;
    },
  }),
  communitySource: setting({
    key: "operatorCommunitySource",
    env: "HOSTKEEPER_OPERATOR_COMMUNITY_SOURCE",
    area: "operator",
    doc: "Artifact source used when an update request has no `artifact_source` (the community edition): an `https://` prefix or `s3://bucket/prefix`.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw)?.replace(/\/+$/, "");
      // Whether plain http is allowed is decided per request, with the other settings at hand.
      const problem = s === undefined ? undefined : sourceProblem(s, true);
      if (problem) throw new Error(problem);
      return s;
    },
  }),
  upstreamFile: setting({
    key: "operatorUpstreamFile",
    env: "HOSTKEEPER_OPERATOR_UPSTREAM_FILE",
    area: "operator",
    doc: "File holding the active instance's `127.0.0.1:<port>`; the operator's route dials `{file.<this path>}`, which Caddy reads per request, so a switch is an atomic rename and no config reload. Caddy must be able to read it: when Caddy runs as another user, use a path outside the data dir.",
    defaultText: "<data dir>/operator/upstream",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw);
      if (s !== undefined && (!s.startsWith("/") || /[{}\s]/.test(s)))
        throw new Error(`must be an absolute path without braces or spaces, got "${s}"`);
      return s;
    },
  }),
  env: setting({
    key: "operatorEnv",
    env: "HOSTKEEPER_OPERATOR_ENV",
    area: "operator",
    doc: 'Extra environment for operator instances, a JSON object of strings (`{"DATABASE_URL":"..."}`). Instances get only `PATH`, `HOME`, `LANG`, `TZ`, `PORT`, `OPERATOR_SLOT`, `OPERATOR_VERSION` and these.',
    defaultText: "{}",
    default: {} as Record<string, string>,
    parse: (raw) => {
      const value: unknown = typeof raw === "string" ? JSON.parse(raw || "{}") : raw;
      if (typeof value !== "object" || value === null || Array.isArray(value))
        throw new Error("expected a JSON object of strings");
      for (const [k, v] of Object.entries(value)) {
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k) || typeof v !== "string")
          throw new Error(`"${k}" must be a variable name with a string value`);
      }
      return value as Record<string, string>;
    },
    // The doc's own example, DATABASE_URL, carries a password.
    secret: true,
  }),
  allowHttp: setting({
    key: "operatorAllowHttp",
    env: "HOSTKEEPER_OPERATOR_ALLOW_HTTP",
    area: "operator",
    doc: "Allow plain `http://` artifact sources and S3 endpoints. Off: only HTTPS is used.",
    defaultText: "false",
    default: false,
    parse: parse.bool,
  }),
  trustedKeys: setting({
    key: "operatorTrustedKeys",
    env: "HOSTKEEPER_OPERATOR_TRUSTED_KEYS",
    area: "operator",
    doc: "minisign public keys (the base64 line of a `minisign.pub`), separated by commas, spaces or newlines (`untrusted comment:` lines are skipped; a list in the config file). When set, an artifact runs only with a valid signature by one of them: `<artifact>.minisig`, else a signed `SHA256SUMS` (`SHA256SUMS.minisig`) listing it. Only minisign's default, prehashed signatures are accepted (docs/api/operator-update.md, Signatures).",
    defaultText: "none (checksums only)",
    default: [] as string[],
    ...minisignKeyList,
  }),
  caFile: setting({
    key: "operatorCaFile",
    env: "HOSTKEEPER_OPERATOR_CA_FILE",
    area: "operator",
    doc: "PEM file of extra certificate authorities trusted for artifact downloads, besides Node's bundled ones (`NODE_EXTRA_CA_CERTS` works too).",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: parse.optionalString,
  }),
  s3Endpoint: setting({
    key: "operatorS3Endpoint",
    env: "HOSTKEEPER_OPERATOR_S3_ENDPOINT",
    area: "operator",
    doc: "Object-storage endpoint for `s3://` sources, e.g. `https://minio.internal:9000`. Default: AWS S3 in the configured region. Requests to this host (or its subdomains) are SigV4-signed with the `AWS_*` credentials of the agent's environment.",
    defaultText: "https://s3.<region>.amazonaws.com",
    default: undefined as string | undefined,
    parse: baseUrl,
  }),
  s3Region: setting({
    key: "operatorS3Region",
    env: "HOSTKEEPER_OPERATOR_S3_REGION",
    area: "operator",
    doc: "Signing region for object storage (`auto` for R2).",
    defaultText: "`AWS_REGION`, else `us-east-1`",
    default: undefined as string | undefined,
    parse: parse.optionalString,
  }),
  s3PathStyle: setting({
    key: "operatorS3PathStyle",
    env: "HOSTKEEPER_OPERATOR_S3_PATH_STYLE",
    area: "operator",
    doc: "Address `s3://` buckets path-style (`<endpoint>/<bucket>/<key>`, what MinIO and most self-hosted stores need) instead of virtual-hosted (`<bucket>.<endpoint host>`).",
    defaultText: "false",
    default: false,
    parse: parse.bool,
  }),
  maxArtifactBytes: setting({
    key: "operatorMaxArtifactBytes",
    env: "HOSTKEEPER_OPERATOR_MAX_ARTIFACT_BYTES",
    area: "operator",
    doc: "Largest operator artifact the agent downloads; a larger one fails the update.",
    defaultText: "536870912",
    default: 536_870_912,
    parse: parse.int(1024, 16 * 1024 ** 3),
  }),
  downloadTimeoutMs: setting({
    key: "operatorDownloadTimeoutMs",
    env: "HOSTKEEPER_OPERATOR_DOWNLOAD_TIMEOUT_MS",
    area: "operator",
    doc: "Longest the whole download of an artifact may take, retries included.",
    defaultText: "900000",
    default: 900_000,
    parse: parse.int(1000, 24 * 3_600_000),
  }),
  downloadIdleTimeoutMs: setting({
    key: "operatorDownloadIdleTimeoutMs",
    env: "HOSTKEEPER_OPERATOR_DOWNLOAD_IDLE_TIMEOUT_MS",
    area: "operator",
    doc: "A download attempt that receives nothing for this long fails (and is retried).",
    defaultText: "30000",
    default: 30_000,
    parse: parse.int(100, 600_000),
  }),
  downloadRetries: setting({
    key: "operatorDownloadRetries",
    env: "HOSTKEEPER_OPERATOR_DOWNLOAD_RETRIES",
    area: "operator",
    doc: "Retries of a failed download attempt (network error, 5xx, truncated body); each resumes with `Range` when the server supports it.",
    defaultText: "4",
    default: 4,
    parse: parse.int(0, 20),
  }),
  retryDelayMs: setting({
    key: "operatorRetryDelayMs",
    env: "HOSTKEEPER_OPERATOR_RETRY_DELAY_MS",
    area: "operator",
    doc: "Delay before the first download retry; it doubles for each further one.",
    defaultText: "1000",
    default: 1000,
    parse: parse.int(0, 600_000),
  }),
  healthTimeoutMs: setting({
    key: "operatorHealthTimeoutMs",
    env: "HOSTKEEPER_OPERATOR_HEALTH_TIMEOUT_MS",
    area: "operator",
    doc: "Health gate: how long a new instance has to answer its health path with 2xx before the update gives up on it.",
    defaultText: "60000",
    default: 60_000,
    parse: parse.int(100, 3_600_000),
  }),
  checkIntervalMs: setting({
    key: "operatorCheckIntervalMs",
    env: "HOSTKEEPER_OPERATOR_CHECK_INTERVAL_MS",
    area: "operator",
    doc: "Interval of health checks (gate and watch) and of the check that restarts a crashed active instance.",
    defaultText: "500",
    default: 500,
    parse: parse.int(20, 60_000),
  }),
  watchMs: setting({
    key: "operatorWatchMs",
    env: "HOSTKEEPER_OPERATOR_WATCH_MS",
    area: "operator",
    doc: "Watch period after the switch: a new instance that exits or fails 3 health checks in a row within it is switched back from.",
    defaultText: "30000",
    default: 30_000,
    parse: parse.int(0, 3_600_000),
  }),
  drainMs: setting({
    key: "operatorDrainMs",
    env: "HOSTKEEPER_OPERATOR_DRAIN_MS",
    area: "operator",
    doc: "After the switch the old instance gets no new requests; it keeps running this long to finish its in-flight ones (and to switch back to at once) before it is stopped.",
    defaultText: "10000",
    default: 10_000,
    parse: parse.int(0, 3_600_000),
  }),
  stopTimeoutMs: setting({
    key: "operatorStopTimeoutMs",
    env: "HOSTKEEPER_OPERATOR_STOP_TIMEOUT_MS",
    area: "operator",
    doc: "How long a stopped instance has between SIGTERM and SIGKILL (sent to its process group).",
    defaultText: "10000",
    default: 10_000,
    parse: parse.int(0, 600_000),
  }),
  restartBackoffMs: setting({
    key: "operatorRestartBackoffMs",
    env: "HOSTKEEPER_OPERATOR_RESTART_BACKOFF_MS",
    area: "operator",
    doc: "First delay before a crashed active instance is restarted; it doubles per crash up to 64 times this, and resets once the instance stays up that long.",
    defaultText: "1000",
    default: 1000,
    parse: parse.int(10, 600_000),
  }),
};
