import { createHash, createPublicKey, type KeyObject, randomBytes, sign, verify } from "node:crypto";

/**
 * The connection's protocol, shared by the agent (connect/client.ts) and the control plane's library
 * (connect/control-plane/). Documented for other implementations in docs/connect.md.
 *
 * Every WebSocket message is one binary frame: a 4-byte big-endian length, that many bytes of a JSON
 * header (`t` says which frame), then the frame's body bytes, if any. Bodies travel as bytes, never
 * re-encoded into the JSON. A frame with a large body is sent as a message of two WebSocket fragments, the
 * head and the body, so that the body is never copied into a buffer of the whole frame.
 */
export const SUBPROTOCOL = "hostkeeper.connect.v1";

/**
 * Bytes of one `data` frame's body at most, and the credit a stream starts with in each direction. A `res`
 * with `end` carries the whole answer (at most CHUNK_BYTES) in its own body: no `data` or `end` follows.
 */
export const CHUNK_BYTES = 64 * 1024;
export const INITIAL_WINDOW = 1024 * 1024;

/** A ping every this long from each side; a peer silent for three of them is dead (within 60 s). */
export const HEARTBEAT_MS = 15_000;
export const DEAD_AFTER_MS = 45_000;

/** How long a handshake may take, from the WebSocket's opening to `welcome`. */
export const HANDSHAKE_MS = 15_000;

export type Headers = Record<string, string | string[]>;

/** Frames of the handshake (docs/connect.md, "The handshake"). */
export type HandshakeFrame =
  | { t: "hello"; v: 1; key: string; nonce: string; binding: string; agent_version: string }
  | { t: "challenge"; key: string; nonce: string; sig: string }
  | { t: "auth"; sig: string; enroll_token?: string }
  | { t: "welcome"; enrolled: boolean }
  | { t: "refused"; code: RefusalCode; reason: string };

export type RefusalCode = "unknown_agent" | "bad_token" | "bad_signature" | "binding_mismatch" | "protocol";

/** Frames once the handshake is done: requests one way, answers the other, events from the agent. */
export type StreamFrame =
  | { t: "req"; id: string; method: string; path: string; headers: Headers; body: boolean }
  | { t: "res"; id: string; status: number; headers: Headers; end?: true }
  | { t: "data"; id: string }
  | { t: "end"; id: string }
  | { t: "abort"; id: string; reason: string }
  | { t: "cancel"; id: string }
  | { t: "win"; id: string; bytes: number }
  | { t: "event"; id: string; headers: Headers }
  | { t: "ack"; id: string; status: number };

export type Frame = HandshakeFrame | StreamFrame;

export function encodeFrame(header: Frame, body?: Uint8Array): Buffer {
  const json = Buffer.from(JSON.stringify(header));
  const out = Buffer.allocUnsafe(4 + json.length + (body?.length ?? 0));
  out.writeUInt32BE(json.length, 0);
  json.copy(out, 4);
  if (body) out.set(body, 4 + json.length);
  return out;
}

export class ProtocolError extends Error {}

/** A frame's header and body; throws ProtocolError on anything that is not one. */
export function decodeFrame(message: Buffer): { header: Frame; body: Buffer } {
  if (message.length < 4) throw new ProtocolError("a frame shorter than its length prefix");
  const length = message.readUInt32BE(0);
  if (length > message.length - 4) throw new ProtocolError("a frame's header runs past its end");
  let header: unknown;
  try {
    header = JSON.parse(message.toString("utf8", 4, 4 + length));
  } catch {
    throw new ProtocolError("a frame's header is not JSON");
  }
  if (typeof header !== "object" || header === null || typeof (header as { t?: unknown }).t !== "string")
    throw new ProtocolError("a frame's header has no type");
  return { header: header as Frame, body: message.subarray(4 + length) };
}

/**
 * A WebSocket message's frame, from the fragments ws hands over (`binaryType = "fragments"`): a message of
 * one fragment, or a head and the body's fragments, which are joined only when there are several.
 */
export function decodeMessage(data: Buffer | ArrayBuffer | Buffer[]): {
  header: Frame;
  body: Buffer;
  bytes: number;
} {
  const parts = Array.isArray(data) ? data : [Buffer.isBuffer(data) ? data : Buffer.from(data)];
  const first = parts[0] ?? Buffer.alloc(0);
  const bytes = parts.reduce((n, p) => n + p.length, 0);
  if (parts.length === 1) return { ...decodeFrame(first), bytes };
  const { header, body: rest } = decodeFrame(first);
  const tail = parts.slice(1);
  const body = rest.length === 0 && tail.length === 1 ? (tail[0] as Buffer) : Buffer.concat([rest, ...tail]);
  return { header, body, bytes };
}

// ----- keys and the handshake's signatures

/** DER prefix of an Ed25519 SubjectPublicKeyInfo; the 32 raw key bytes follow it. */
const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/** The public key from base64 of its 32 bytes; throws on anything else. */
export function publicKeyFromBase64(b64: string): KeyObject {
  const raw = Buffer.from(b64, "base64");
  if (raw.length !== 32 || raw.toString("base64") !== b64.trim())
    throw new Error("an Ed25519 public key is base64 of 32 bytes");
  return createPublicKey({ key: Buffer.concat([SPKI_PREFIX, raw]), format: "der", type: "spki" });
}

/** Base64 of the key's 32 bytes. */
export function publicKeyBase64(key: KeyObject): string {
  const der = (key.type === "private" ? createPublicKey(key) : key).export({ format: "der", type: "spki" });
  return der.subarray(SPKI_PREFIX.length).toString("base64");
}

/** `SHA256:` and the unpadded base64 of the key bytes' SHA-256, as OpenSSH shows keys. */
export function fingerprintOf(publicKeyB64: string): string {
  const digest = createHash("sha256").update(Buffer.from(publicKeyB64, "base64")).digest("base64");
  return `SHA256:${digest.replace(/=+$/, "")}`;
}

export const newNonce = () => randomBytes(32).toString("base64");

/**
 * What each side signs: a label saying which side signs (so one side's signature is never the other's),
 * both keys, both nonces, and the channel binding as the agent saw it. Length-prefixed fields, so no two
 * different transcripts are the same bytes.
 */
export function transcript(
  side: "agent" | "control-plane",
  t: {
    agentKey: string;
    controlPlaneKey: string;
    agentNonce: string;
    controlPlaneNonce: string;
    binding: string;
  },
): Buffer {
  const parts = [
    `hostkeeper-connect-v1 ${side}`,
    t.agentKey,
    t.controlPlaneKey,
    t.agentNonce,
    t.controlPlaneNonce,
    t.binding,
  ].map((s) => Buffer.from(s));
  return Buffer.concat(
    parts.flatMap((p) => {
      const len = Buffer.allocUnsafe(4);
      len.writeUInt32BE(p.length, 0);
      return [len, p];
    }),
  );
}

export const signTranscript = (privateKey: KeyObject, data: Buffer) =>
  sign(null, data, privateKey).toString("base64");

export function verifyTranscript(publicKey: KeyObject, data: Buffer, signature: string): boolean {
  try {
    return verify(null, data, publicKey, Buffer.from(signature, "base64"));
  } catch {
    return false;
  }
}

/**
 * The channel binding of a TLS socket, RFC 9266's `tls-exporter` (32 bytes of keying material under the
 * label `EXPORTER-Channel-Binding`), base64; empty without TLS (a loopback `ws://` connection).
 */
export function channelBinding(socket: unknown): string {
  const tls = socket as { exportKeyingMaterial?: (n: number, label: string, ctx: Buffer) => Buffer };
  if (typeof tls?.exportKeyingMaterial !== "function") return "";
  return tls.exportKeyingMaterial(32, "EXPORTER-Channel-Binding", Buffer.alloc(0)).toString("base64");
}
