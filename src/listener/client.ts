import { X509Certificate } from "node:crypto";
import type { ConnectionOptions } from "node:tls";
import type { AppConfig } from "../settings.js";
import { fs } from "../util/node-builtins.js";

const { readFileSync } = fs;

/**
 * How a client on this host (the CLI, the unit's health probe) speaks TLS to the agent its configuration
 * describes; undefined when the agent serves plain HTTP. The agent's certificate is trusted by
 * `HOSTKEEPER_CLI_TLS_CA` when set (with the usual name check), else pinned: exactly the certificate of
 * `HOSTKEEPER_TLS_CERT` is accepted (by its SHA-256 fingerprint, whatever name it carries, since the CLI
 * dials a loopback address). A client certificate is presented when one is configured.
 */
export function agentTlsOptions(c: AppConfig["listener"]): ConnectionOptions | undefined {
  if (c.tlsCert === undefined) return undefined;
  const read = (file: string, what: string) => {
    try {
      return readFileSync(file);
    } catch (err) {
      throw new Error(
        `cannot read ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      );
    }
  };
  const client =
    c.cliTlsCert !== undefined && c.cliTlsKey !== undefined
      ? { cert: read(c.cliTlsCert, "the client certificate"), key: read(c.cliTlsKey, "the client key") }
      : {};
  if (c.cliTlsCa !== undefined) return { ca: read(c.cliTlsCa, "the CA file"), ...client };
  const chain = read(c.tlsCert, "the agent's certificate");
  const pinned = new X509Certificate(chain).fingerprint256;
  return {
    // The file's certificates are trust anchors even when not self-signed; the check below accepts only the first.
    ca: chain,
    allowPartialTrustChain: true,
    checkServerIdentity: (_host, cert) =>
      cert.fingerprint256 === pinned
        ? undefined
        : new Error(
            `the agent's certificate (${cert.fingerprint256}) is not the one in ${c.tlsCert} (${pinned})`,
          ),
    ...client,
  };
}
