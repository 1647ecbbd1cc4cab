import { mkdir, rename, rm } from "node:fs/promises";
import { dirname } from "node:path";
import { ArtifactAuthentication, type Authentication } from "../operator/artifacts/authentication.js";
import type { Downloader } from "../operator/artifacts/download.js";
import { parseTrustedKeys, type TrustedKey } from "../operator/artifacts/minisign.js";
import type { ArtifactSource } from "../operator/artifacts/source.js";
import { artifactTransport } from "../operator/artifacts/transport.js";
import { UpdateFailure } from "../operator/failure.js";
import type { AppConfig } from "../settings.js";

/** A package in a release: `<source>/<version>/<file>`, or `<source>/<file>` with an empty version. */
export interface PackageRef {
  source: string;
  version: string;
  file: string;
  /** The sha256 the request gave, checked besides the signature. */
  checksum: string | null;
}

/**
 * A package URL as a reference: its folder is the source, its last segment the file, which names the
 * download in the update's folder: a plain name (the request's schema allows no other), checked again here.
 */
export function refOfUrl(url: string, checksum: string | null): PackageRef {
  const cut = url.lastIndexOf("/");
  const file = url.slice(cut + 1);
  if (!/^[A-Za-z0-9][A-Za-z0-9._+~-]*$/.test(file)) throw new Error(`"${file}" is not a plain file name`);
  return { source: url.slice(0, cut), version: "", file, checksum };
}

/**
 * Fetches an agent package and proves it: a minisign signature by one of the agent's update keys, over the
 * package or over the `SHA256SUMS` beside it that lists it (operator/artifacts: the same checks as an
 * operator release with trusted keys), and the request's checksum when it gave one. Nothing unsigned passes:
 * the service refuses to start without keys.
 */
export class PackageFetch {
  private readonly source: ArtifactSource;
  private readonly downloader: Downloader;
  private readonly keys: TrustedKey[];

  constructor(
    operator: AppConfig["operator"],
    keys: readonly string[],
    env: NodeJS.ProcessEnv,
    private readonly signal: AbortSignal,
  ) {
    ({ source: this.source, downloader: this.downloader } = artifactTransport(operator, env));
    this.keys = parseTrustedKeys(keys);
  }

  locate(ref: PackageRef): URL {
    return this.source.locate(ref.source, ref.version, ref.file);
  }

  /**
   * Downloads `ref` into `dest` (through `<dest>.part`) and checks it; `progress` sees the bytes. Throws an
   * `UpdateFailure` naming what failed, with nothing left at `dest`.
   */
  async fetch(
    ref: PackageRef,
    dest: string,
    progress: (done: number, total: number | undefined) => void = () => {},
    verifying: () => void = () => {},
  ): Promise<Authentication> {
    const release = { artifact_source: ref.source, version: ref.version, checksum: ref.checksum };
    const auth = new ArtifactAuthentication({
      source: this.source,
      downloader: this.downloader,
      artifactName: ref.file,
      trustedKeys: this.keys,
      signal: this.signal,
    });
    const proof = await auth.authenticate(release);
    if (proof === undefined)
      throw new UpdateFailure("signature_missing", "no key is trusted for the agent's packages");
    const part = `${dest}.part`;
    await mkdir(dirname(dest), { recursive: true, mode: 0o700 });
    try {
      await this.downloader.toFile(this.locate(ref), part, progress, this.signal);
      verifying();
      await auth.verify(part, release, await auth.expectedChecksum(release, proof), proof);
      await rename(part, dest);
    } finally {
      await rm(part, { force: true });
    }
    return proof;
  }
}
