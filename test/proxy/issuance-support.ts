import { readFileSync } from "node:fs";
import { join } from "node:path";
import tls from "node:tls";

/** The host's trust stores, which a Caddy run as root changes when it may install its local CA. */
export const TRUST_STORES = [
  "/usr/local/share/ca-certificates",
  "/etc/ssl/certs/ca-certificates.crt",
  "/etc/ssl/certs/java/cacerts",
  "/etc/pki/ca-trust/source/anchors",
  join(process.env.HOME ?? "/root", ".pki/nssdb"),
];

export interface Served {
  authorized: boolean;
  error: string | undefined;
  subject: string;
  issuer: string;
  altNames: string;
}

/**
 * The certificate a TLS client gets for `servername` (SNI) from 127.0.0.1:`port`, checked against `ca`
 * (PEM): whether it chains to it, and what it says. Rejects when the handshake fails.
 */
export function servedCertificate(port: number, servername: string, ca: string): Promise<Served> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: "127.0.0.1", port, servername, ca, rejectUnauthorized: false }, () => {
      const cert = socket.getPeerCertificate();
      const cn = (v: string | string[] | undefined) => (Array.isArray(v) ? v.join(",") : (v ?? ""));
      resolve({
        authorized: socket.authorized,
        error: socket.authorizationError?.toString(),
        subject: cn(cert.subject?.CN),
        issuer: cn(cert.issuer?.CN),
        altNames: cert.subjectaltname ?? "",
      });
      socket.end();
    });
    socket.setTimeout(5_000, () => socket.destroy(new Error("TLS handshake timed out")));
    socket.on("error", reject);
  });
}

/** Caddy's local CA root, from the storage of a test Caddy (its XDG_DATA_HOME is `<dir>/data`). */
export const localRoot = (dataHome: string) =>
  readFileSync(join(dataHome, "caddy", "pki", "authorities", "local", "root.crt"), "utf8");
