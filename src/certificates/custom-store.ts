import { createHash } from "node:crypto";
import { join } from "node:path";
import { fs } from "../util/node-builtins.js";
import { type CertificateFacts, certificateBlocks, leafFacts } from "./pem.js";

const { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync, chmodSync } = fs;

/** A custom certificate the agent holds: its chain, its key, what the leaf says, and its content's hash. */
export interface CustomCertificate {
  name: string;
  certificatePem: string;
  keyPem: string;
  facts: CertificateFacts;
  /** Of chain and key: names Caddy's copies, so a replaced certificate is a new file name and a config change. */
  hash: string;
}

const SUFFIX = ".pem";
const KEY_BLOCK = /-----BEGIN PRIVATE KEY-----[\s\S]*?-----END PRIVATE KEY-----\n?/;

const contentHash = (certificatePem: string, keyPem: string) =>
  createHash("sha256").update(certificatePem).update("\0").update(keyPem).digest("hex").slice(0, 16);

/** A custom certificate's name: it becomes file names, so the API's pattern is held here too. */
export const CERTIFICATE_NAME = /^(?!.*\.\.)[a-z0-9][a-z0-9._-]{0,63}$/;

export function customCertificate(name: string, certificatePem: string, keyPem: string): CustomCertificate {
  if (!CERTIFICATE_NAME.test(name))
    throw new Error(`${JSON.stringify(name)} is not a custom certificate name`);
  return {
    name,
    certificatePem,
    keyPem,
    facts: leafFacts(certificatePem),
    hash: contentHash(certificatePem, keyPem),
  };
}

/**
 * The custom certificates as the agent keeps them, with its other secrets: one file per certificate,
 * `<data dir>/certificates/<name>.pem` (the chain, then the key), mode 0600 in a 0700 folder, replaced by
 * a rename so a reader never sees half of one. Read once at start and held; the source Caddy's copies are
 * made from (CaddyCopies) whenever they are missing.
 */
export class CustomCertificateStore {
  private readonly dir: string;
  private readonly held = new Map<string, CustomCertificate>();

  constructor(dataDir: string) {
    this.dir = join(dataDir, "certificates");
    let names: string[] = [];
    try {
      names = readdirSync(this.dir).filter((f) => f.endsWith(SUFFIX));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    for (const file of names) {
      const text = readFileSync(join(this.dir, file), "utf8");
      const key = KEY_BLOCK.exec(text)?.[0];
      const name = file.slice(0, -SUFFIX.length);
      try {
        if (key !== undefined)
          this.held.set(name, customCertificate(name, `${certificateBlocks(text).join("\n")}\n`, key));
      } catch {
        // Not one the agent wrote (another name, no certificate that parses): not a custom certificate.
      }
    }
  }

  get(name: string): CustomCertificate | undefined {
    return this.held.get(name);
  }

  /** Every custom certificate, by name. */
  all(): CustomCertificate[] {
    return [...this.held.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  put(cert: CustomCertificate): void {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const path = join(this.dir, `${cert.name}${SUFFIX}`);
    const tmp = `${path}.tmp`;
    writeFileSync(tmp, cert.certificatePem + cert.keyPem, { mode: 0o600 });
    chmodSync(tmp, 0o600);
    renameSync(tmp, path);
    this.held.set(cert.name, cert);
  }

  remove(name: string): void {
    rmSync(join(this.dir, `${name}${SUFFIX}`), { force: true });
    this.held.delete(name);
  }
}
