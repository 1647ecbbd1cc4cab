import { createHash } from "node:crypto";
import { UpdateFailure } from "../failure.js";
import type { UpdateRow } from "../store.js";
import { checksumFor, type Downloader, hashFile } from "./download.js";
import { checkSignature, parseSignature, type Signature, type TrustedKey, verifyDigest } from "./minisign.js";
import type { ArtifactSource } from "./source.js";

const SHA256SUMS_MAX_BYTES = 1_048_576;

/** A request's checksum (`sha256:<hex>` or hex, either case) as the hex digest compares: lower case, bare. */
export const normalizeChecksum = (c: string | undefined) => c?.replace(/^sha256:/, "").toLowerCase();
/** A `.minisig` is four short lines; anything much larger is not one. */
const MINISIG_MAX_BYTES = 4096;

/** How an artifact is authenticated when trusted keys are configured. */
export type Authentication =
  | { signed: "artifact"; sig: Signature; key: TrustedKey; file: string }
  /** A signed SHA256SUMS, and the sha256 it lists for the artifact. */
  | { signed: "SHA256SUMS"; sig: Signature; key: TrustedKey; file: string; sha256: string };

/** The release an update installs: where it comes from, and the checksum its request gave, if any. */
type Release = Pick<UpdateRow, "artifact_source" | "version" | "checksum">;

export interface ArtifactAuthenticationOptions {
  source: ArtifactSource;
  downloader: Downloader;
  artifactName: string;
  /** With none, an artifact is checked against its checksum alone. */
  trustedKeys: readonly TrustedKey[];
  /** Ends a fetch early when the agent stops. */
  signal: AbortSignal;
}

/**
 * What a downloaded artifact must match before it is installed. With trusted keys: a minisign signature by
 * one of them, over the artifact itself or over the release's `SHA256SUMS` listing it. Without: its sha256,
 * from the request, else from the release's `SHA256SUMS`. A checksum in the request must match in both cases.
 */
export class ArtifactAuthentication {
  constructor(private readonly o: ArtifactAuthenticationOptions) {}

  /**
   * With trusted keys: `<artifact>.minisig`, else `SHA256SUMS.minisig` with the `SHA256SUMS` it signs (checked
   * here, as it is small, and the artifact's sha256 taken from it). Either signature must be by a trusted key
   * with an intact trusted comment. Undefined without trusted keys. The artifact itself is checked by `verify`.
   */
  async authenticate(r: Release): Promise<Authentication | undefined> {
    if (this.o.trustedKeys.length === 0) return undefined;
    const name = this.o.artifactName;
    // Probed: a bucket answers 403 for a missing key to a reader without the right to list it.
    const own = await this.fetch(r, `${name}.minisig`, MINISIG_MAX_BYTES, [403, 404]);
    if (own.bytes !== undefined) {
      const sig = parseSignature(own.bytes.toString("utf8"), `${name}.minisig`);
      return {
        signed: "artifact",
        sig,
        key: checkSignature(sig, this.o.trustedKeys, `${name}.minisig`),
        file: name,
      };
    }
    const sums = await this.fetch(r, "SHA256SUMS.minisig", MINISIG_MAX_BYTES);
    if (sums.bytes === undefined)
      throw new UpdateFailure(
        "signature_missing",
        `trusted keys are configured, and neither ${own.url} nor ${sums.url} exists`,
      );
    const sig = parseSignature(sums.bytes.toString("utf8"), "SHA256SUMS.minisig");
    const key = checkSignature(sig, this.o.trustedKeys, "SHA256SUMS.minisig");
    const list = await this.fetch(r, "SHA256SUMS", SHA256SUMS_MAX_BYTES);
    if (list.bytes === undefined)
      throw new UpdateFailure("signature_missing", `${sums.url} exists but ${list.url} does not`);
    // The signature is over the file's bytes as published, not over a decoding of them.
    verifyDigest(sig, key, createHash("blake2b512").update(list.bytes).digest(), "SHA256SUMS");
    const sha256 = checksumFor(list.bytes.toString("utf8"), name);
    if (!sha256)
      throw new UpdateFailure("checksum_unavailable", `the signed ${list.url} does not list ${name}`);
    return { signed: "SHA256SUMS", sig, key, file: "SHA256SUMS", sha256 };
  }

  /**
   * The sha256 the artifact must have: the request's, else the signed SHA256SUMS's, else the unsigned one's;
   * null for an artifact signed itself, which needs none.
   */
  async expectedChecksum(r: Release, auth: Authentication | undefined): Promise<string | null> {
    if (r.checksum !== null) return r.checksum;
    if (auth === undefined) return this.listedChecksum(r);
    return auth.signed === "SHA256SUMS" ? auth.sha256 : null;
  }

  /** Checks the downloaded `file` against the request's checksum and the authentication; throws if it fails. */
  async verify(
    file: string,
    r: Release,
    expected: string | null,
    auth: Authentication | undefined,
  ): Promise<void> {
    const hashes = await hashFile(file, ["sha256", "blake2b512"]);
    const actual = hashes.sha256.toString("hex");
    if (r.checksum !== null && actual !== r.checksum)
      throw new UpdateFailure(
        "checksum_mismatch",
        `the artifact's sha256 is ${actual}, expected ${r.checksum}`,
      );
    if (auth?.signed === "SHA256SUMS" && actual !== auth.sha256)
      throw new UpdateFailure(
        "signature_mismatch",
        `the artifact's sha256 is ${actual}, but the signed ${auth.file} lists ${auth.sha256}: it was changed after signing`,
      );
    if (auth?.signed === "artifact") verifyDigest(auth.sig, auth.key, hashes.blake2b512, "the artifact");
    if (auth === undefined && actual !== expected)
      throw new UpdateFailure(
        "checksum_mismatch",
        `the artifact's sha256 is ${actual}, expected ${expected}`,
      );
  }

  /** The checksum `<source>/<version>/SHA256SUMS` lists for the artifact; without one, no update. */
  private async listedChecksum(r: Release): Promise<string> {
    const name = this.o.artifactName;
    const url = this.o.source.locate(r.artifact_source, r.version, "SHA256SUMS");
    const text = await this.o.downloader.text(url, SHA256SUMS_MAX_BYTES, this.o.signal);
    if (text === undefined)
      throw new UpdateFailure(
        "checksum_unavailable",
        `the request has no checksum and ${url} does not exist`,
      );
    const sum = checksumFor(text, name);
    if (!sum) throw new UpdateFailure("checksum_unavailable", `${url} does not list ${name}`);
    return sum;
  }

  private async fetch(r: Release, file: string, max: number, absent?: number[]) {
    const url = this.o.source.locate(r.artifact_source, r.version, file);
    return { url, bytes: await this.o.downloader.small(url, max, this.o.signal, absent) };
  }
}
