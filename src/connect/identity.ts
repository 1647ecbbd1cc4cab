import { createPrivateKey, generateKeyPairSync, type KeyObject } from "node:crypto";
import { loadOrCreateSecret, readSecret } from "../store/secrets.js";
import { fingerprintOf, publicKeyBase64 } from "./protocol.js";

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
  const publicKey = publicKeyBase64(privateKey);
  return { identity: { publicKey, fingerprint: fingerprintOf(publicKey) }, privateKey };
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
