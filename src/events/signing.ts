import { createHmac } from "node:crypto";

/** Standard Webhooks signature: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, key = base64 part of `whsec_`. */
export function signWebhook(secret: string, id: string, timestampSeconds: number, body: string): string {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const mac = createHmac("sha256", key).update(`${id}.${timestampSeconds}.${body}`).digest("base64");
  return `v1,${mac}`;
}
