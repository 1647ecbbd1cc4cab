import type { AppConfig } from "../../settings.js";
import { fs } from "../../util/node-builtins.js";
import { Downloader } from "./download.js";
import { ArtifactSource } from "./source.js";

/**
 * Where releases are fetched from and how: the operator's download settings (the HTTP rule, extra CAs,
 * object storage, size cap, time-outs, retries), which the agent's own packages are fetched with too.
 * `env`: where the object-storage credentials are read.
 */
export function artifactTransport(
  c: AppConfig["operator"],
  env: NodeJS.ProcessEnv,
): { source: ArtifactSource; downloader: Downloader } {
  const source = new ArtifactSource({
    allowHttp: c.allowHttp,
    s3Endpoint: c.s3Endpoint,
    s3Region: c.s3Region,
    s3PathStyle: c.s3PathStyle,
    env,
  });
  const downloader = new Downloader({
    source,
    extraCa: c.caFile === undefined ? undefined : fs.readFileSync(c.caFile, "utf8"),
    maxBytes: c.maxArtifactBytes,
    idleTimeoutMs: c.downloadIdleTimeoutMs,
    totalTimeoutMs: c.downloadTimeoutMs,
    retries: c.downloadRetries,
    retryDelayMs: c.retryDelayMs,
  });
  return { source, downloader };
}
