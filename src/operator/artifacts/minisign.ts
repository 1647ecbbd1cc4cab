import { createPublicKey, type KeyObject, verify } from "node:crypto";
import { UpdateFailure } from "../failure.js";

/**
 * minisign signatures, checked with Node's own Ed25519 and BLAKE2b-512 (no minisign binary needed).
 *
 * A public key is base64 of `"Ed" || key id (8 bytes) || Ed25519 key (32 bytes)`. A `.minisig` file is four
 * lines: an untrusted comment, base64 of `"ED" || key id || signature (64)` where the signature is over the
 * BLAKE2b-512 of the file (minisign's default, prehashed form), `trusted comment: <text>`, and base64 of the
 * global signature over `signature || <text>`, which is what makes the comment trustworthy. The legacy form
 * (`"Ed"`, a signature over the whole file, `minisign -S -l`) is refused: it needs the whole artifact in
 * memory, minisign signs prehashed by default since 0.10 (with `-H` since 0.6), and upstream plans to drop
 * the legacy form.
 */
export interface TrustedKey {
  /** The key id as minisign prints it (upper-case hex, without leading zeros). */
  id: string;
  key: KeyObject;
}

/** DER prefix of an Ed25519 SubjectPublicKeyInfo; the 32 raw key bytes follow it. */
const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/**
 * minisign prints a key id as the little-endian 64-bit number it stores, in hex without leading zeros
 * (`%" PRIX64`), as in the comment line of its `.pub` files.
 */
const showKeyId = (id: Buffer) => id.readBigUInt64LE(0).toString(16).toUpperCase();

/** One minisign public key: its base64 line (what `minisign.pub` holds below its comment). */
export function parseTrustedKey(line: string): TrustedKey {
  const raw = Buffer.from(line, "base64");
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(line) || raw.length !== 42 || raw.toString("latin1", 0, 2) !== "Ed")
    throw new Error(`"${line.slice(0, 60)}" is not a minisign public key (base64 of 42 bytes starting "Ed")`);
  return {
    id: showKeyId(raw.subarray(2, 10)),
    key: createPublicKey({
      key: Buffer.concat([ED25519_SPKI_PREFIX, raw.subarray(10)]),
      format: "der",
      type: "spki",
    }),
  };
}

/**
 * The key lines of `HOSTKEEPER_OPERATOR_TRUSTED_KEYS`: base64 keys separated by commas, spaces or newlines.
 * `untrusted comment:` lines are skipped, so the whole text of a `minisign.pub` (or several) can be pasted.
 */
export function trustedKeyLines(text: string): string[] {
  return text
    .split(/\r?\n/)
    .filter((l) => !/^\s*untrusted comment:/i.test(l))
    .join(" ")
    .split(/[\s,]+/)
    .filter((w) => w !== "");
}

/** The keys of those lines; throws on a malformed key or a key id listed twice. */
export function parseTrustedKeys(lines: readonly string[]): TrustedKey[] {
  const keys = lines.map(parseTrustedKey);
  if (new Set(keys.map((k) => k.id)).size !== keys.length) throw new Error("lists the same key id twice");
  return keys;
}

export interface Signature {
  keyId: string;
  /** Ed25519 signature over the BLAKE2b-512 of the signed file. */
  signature: Buffer;
  trustedComment: string;
  globalSignature: Buffer;
}

/** Reads a `.minisig` text; a malformed one is `signature_invalid`. */
export function parseSignature(text: string, file: string): Signature {
  const invalid = (why: string) => new UpdateFailure("signature_invalid", `${file}: ${why}`);
  const lines = text.split(/\r?\n/);
  const [, sigLine, commentLine, globalLine] = lines;
  if (!lines[0]?.startsWith("untrusted comment:") || sigLine === undefined)
    throw invalid("not a minisign signature file");
  const sig = Buffer.from(sigLine.trim(), "base64");
  if (sig.length !== 74) throw invalid("the signature line is not base64 of 74 bytes");
  const alg = sig.toString("latin1", 0, 2);
  if (alg === "Ed")
    throw invalid("a legacy (not prehashed) signature, which is not accepted; sign without `-l`");
  if (alg !== "ED") throw invalid(`unknown signature algorithm "${alg}"`);
  const prefix = "trusted comment: ";
  if (!commentLine?.startsWith(prefix)) throw invalid("no trusted comment line");
  const globalSignature = Buffer.from(globalLine?.trim() ?? "", "base64");
  if (globalSignature.length !== 64) throw invalid("the global signature is not base64 of 64 bytes");
  return {
    keyId: showKeyId(sig.subarray(2, 10)),
    signature: sig.subarray(10),
    trustedComment: commentLine.slice(prefix.length),
    globalSignature,
  };
}

/**
 * Checks everything about a signature that does not need the signed file: a trusted key made it
 * (`signature_unknown_key`) and its trusted comment is the one signed with it (`signature_invalid`).
 * Answers the key, for `verifyDigest`.
 */
export function checkSignature(sig: Signature, keys: readonly TrustedKey[], file: string): TrustedKey {
  const key = keys.find((k) => k.id === sig.keyId);
  if (!key)
    throw new UpdateFailure(
      "signature_unknown_key",
      `${file} is signed by key ${sig.keyId}, which is not among the trusted keys (${keys.map((k) => k.id).join(", ")})`,
    );
  const signed = Buffer.concat([sig.signature, Buffer.from(sig.trustedComment, "utf8")]);
  if (!verify(null, signed, key.key, sig.globalSignature))
    throw new UpdateFailure(
      "signature_invalid",
      `${file}: the signature or its trusted comment was altered (the global signature does not verify)`,
    );
  return key;
}

/**
 * Whether the signature covers a file whose BLAKE2b-512 is `digest`; a mismatch means the file is not the
 * one that was signed (`signature_mismatch`).
 */
export function verifyDigest(sig: Signature, key: TrustedKey, digest: Buffer, what: string): void {
  if (!verify(null, digest, key.key, sig.signature))
    throw new UpdateFailure(
      "signature_mismatch",
      `${what} does not match its signature by key ${key.id}: it was changed after signing`,
    );
}
