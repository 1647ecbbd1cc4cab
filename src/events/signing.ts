import { createHmac, createSecretKey, type KeyObject } from "node:crypto";

/**
 * The key of the last secret signed with, as a KeyObject: every attempt signs with the same secret, and
 * Node's HMAC takes a KeyObject several times faster than a key it has to wrap from a Buffer each call.
 */
let last: { secret: string; key: KeyObject } | undefined;

function keyOf(secret: string): KeyObject {
  if (last?.secret !== secret)
    last = { secret, key: createSecretKey(Buffer.from(secret.replace(/^whsec_/, ""), "base64")) };
  return last.key;
}

/** Standard Webhooks signature: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, key = base64 part of `whsec_`. */
export function signWebhook(secret: string, id: string, timestampSeconds: number, body: string): string {
  const mac = createHmac("sha256", keyOf(secret))
    .update(`${id}.${timestampSeconds}.${body}`)
    .digest("base64");
  return `v1,${mac}`;
}
