import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
} from "node:crypto";
import { loadOrCreateSecret, readSecret } from "../store/secrets.js";

/**
 * The agent's own key pair, for the outbound connection to its control plane (docs/security.md, "The
 * agent's key"): Ed25519, made at the agent's first start, the private key in `<data dir>/connect-key` (PKCS#8
 * PEM, 0600, root's), never logged or answered. What is shown is the public key, base64 of its 32 bytes, and
 * its fingerprint, `SHA256:` and the unpadded base64 of the SHA-256 of those bytes (as OpenSSH shows keys).
 */
export interface AgentIdentity {
  publicKey: string;
  fingerprint: string;
}

export const KEY_FILE = "connect-key";

/** DER prefix of an Ed25519 SubjectPublicKeyInfo; the 32 raw key bytes follow it. */
const ED25519_SPKI_PREFIX_BYTES = 12;

const generate = () =>
  generateKeyPairSync("ed25519").privateKey.export({ format: "pem", type: "pkcs8" }).toString().trim();

/** The public half of a stored private key, shown; throws when the file holds no Ed25519 private key. */
function identityOf(pem: string, path: string): { identity: AgentIdentity; privateKey: KeyObject } {
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(pem);
  } catch (err) {
    throw new Error(
      `${path} holds no private key the agent can read (${(err as Error).message}); move it away and start the agent to make a new one`,
    );
  }
  if (privateKey.asymmetricKeyType !== "ed25519")
    throw new Error(`${path} holds a ${privateKey.asymmetricKeyType} key, not an Ed25519 one`);
  const spki = createPublicKey(privateKey).export({ format: "der", type: "spki" });
  const raw = spki.subarray(ED25519_SPKI_PREFIX_BYTES);
  return {
    identity: {
      publicKey: raw.toString("base64"),
      fingerprint: `SHA256:${createHash("sha256").update(raw).digest("base64").replace(/=+$/, "")}`,
    },
    privateKey,
  };
}

/** The agent's key pair, made (and stored 0600) when there is none yet. */
export function loadOrCreateIdentity(dataDir: string): {
  identity: AgentIdentity;
  privateKey: KeyObject;
  created: boolean;
  path: string;
} {
  const { value, path, created } = loadOrCreateSecret(dataDir, KEY_FILE, generate);
  return { ...identityOf(value, path), created, path };
}

/** The agent's public key as stored, undefined before the agent's first start; creates nothing. */
export function readIdentity(dataDir: string): { identity: AgentIdentity | undefined; path: string } {
  const { value, path } = readSecret(dataDir, KEY_FILE);
  return { identity: value === undefined ? undefined : identityOf(value, path).identity, path };
}
