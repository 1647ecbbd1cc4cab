import { createPrivateKey, type KeyObject, X509Certificate } from "node:crypto";
import { type InputIssue, InvalidInputError } from "../util/invalid-input.js";

/** A certificate chain and its key may take this many bytes together (the issue's 64 KiB). */
export const MAX_PEM_BYTES = 64 * 1024;

const CERT_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

/** What the agent shows of a certificate: read once per file (see CertificateFiles). */
export interface CertificateFacts {
  /** The DNS names (and IP addresses) it covers: its subjectAltName, else its CN. Lowercase. */
  names: string[];
  /** The issuer's distinguished name on one line (`C=US, O=Let's Encrypt, CN=R11`). */
  issuer: string;
  /** Hex, uppercase, as TLS clients show it. */
  serial: string;
  notBefore: Date;
  notAfter: Date;
}

/** The certificate blocks of a PEM text, in order. */
export const certificateBlocks = (pem: string): string[] => pem.match(CERT_BLOCK) ?? [];

export function factsOf(leaf: X509Certificate): CertificateFacts {
  const names = (leaf.subjectAltName ?? "")
    .split(", ")
    .map((n) => /^(?:DNS|IP Address):(.+)$/.exec(n)?.[1]?.toLowerCase())
    .filter((n): n is string => n !== undefined);
  const cn = /^CN=(.+)$/m.exec(leaf.subject)?.[1];
  return {
    names: names.length > 0 ? names : cn === undefined ? [] : [cn.toLowerCase()],
    issuer: leaf.issuer.split("\n").join(", "),
    serial: leaf.serialNumber.toUpperCase(),
    notBefore: leaf.validFromDate,
    notAfter: leaf.validToDate,
  };
}

/** The facts of the first certificate of a PEM bundle (Caddy's `.crt` files: the leaf, then the chain). */
export function leafFacts(pem: string | Buffer): CertificateFacts {
  const text = typeof pem === "string" ? pem : pem.toString("utf8");
  const first = certificateBlocks(text)[0];
  if (first === undefined) throw new Error("no certificate in the file");
  return factsOf(new X509Certificate(first));
}

/** A custom certificate that passed every check: its chain (leaf first), its key, and what it says. */
export interface CheckedCertificate {
  certificatePem: string;
  keyPem: string;
  facts: CertificateFacts;
}

function parseChain(pem: string, issues: InputIssue[]): X509Certificate[] {
  const blocks = certificateBlocks(pem);
  if (blocks.length === 0) {
    issues.push({
      field: "certificate_pem",
      message: "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
    });
    return [];
  }
  const chain: X509Certificate[] = [];
  for (const [i, block] of blocks.entries()) {
    try {
      chain.push(new X509Certificate(block));
    } catch {
      issues.push({ field: "certificate_pem", message: `certificate ${i + 1} of the chain does not parse` });
      return [];
    }
  }
  for (let i = 1; i < chain.length; i++) {
    const [child, parent] = [chain[i - 1], chain[i]];
    if (child && parent && !(child.checkIssued(parent) && child.verify(parent.publicKey)))
      issues.push({
        field: "certificate_pem",
        message: `certificate ${i + 1} of the chain did not issue certificate ${i}: the chain goes leaf first, each certificate followed by its issuer`,
      });
  }
  return chain;
}

function parseKey(pem: string, issues: InputIssue[]): KeyObject | undefined {
  if (!/-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----/.test(pem)) {
    issues.push({ field: "key_pem", message: "holds no PEM private key (-----BEGIN PRIVATE KEY-----)" });
    return undefined;
  }
  try {
    return createPrivateKey(pem);
  } catch {
    issues.push({ field: "key_pem", message: "does not parse as an unencrypted private key" });
    return undefined;
  }
}

/**
 * Checks a custom certificate as the API takes it: at most 64 KiB together, a chain that parses (leaf first,
 * each certificate issued by the next), an unencrypted key that belongs to the leaf, a leaf that has not
 * expired and names at least one host. Throws InvalidInputError naming each field that is wrong.
 */
export function checkCustomCertificate(
  certificatePem: string,
  keyPem: string,
  now: Date,
): CheckedCertificate {
  const size = Buffer.byteLength(certificatePem) + Buffer.byteLength(keyPem);
  if (size > MAX_PEM_BYTES)
    throw new InvalidInputError([
      {
        field: "certificate_pem",
        message: `and key_pem are ${size} bytes together; at most ${MAX_PEM_BYTES} (64 KiB) are taken`,
      },
    ]);
  const issues: InputIssue[] = [];
  const chain = parseChain(certificatePem, issues);
  const key = parseKey(keyPem, issues);
  const leaf = chain[0];
  if (leaf !== undefined) {
    if (key !== undefined && !leaf.checkPrivateKey(key))
      issues.push({ field: "key_pem", message: "is not the key of the chain's first certificate" });
    if (leaf.validToDate.getTime() <= now.getTime())
      issues.push({ field: "certificate_pem", message: `expired at ${leaf.validToDate.toISOString()}` });
    if (factsOf(leaf).names.length === 0)
      issues.push({ field: "certificate_pem", message: "names no host (no subjectAltName, no CN)" });
  }
  if (issues.length > 0 || leaf === undefined || key === undefined) throw new InvalidInputError(issues);
  // Stored as Caddy reads them best: the certificate blocks alone, the key as PKCS #8 whatever form it came in.
  return {
    certificatePem: `${certificateBlocks(certificatePem).join("\n")}\n`,
    keyPem: key.export({ type: "pkcs8", format: "pem" }).toString(),
    facts: factsOf(leaf),
  };
}
