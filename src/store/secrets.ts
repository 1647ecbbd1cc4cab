import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { fs } from "../util/node-builtins.js";

const { chmodSync, mkdirSync, readFileSync, writeFileSync } = fs;

/**
 * The secret stored in `<dataDir>/<name>`, undefined when the file is absent or empty; other failures to read
 * it (permissions) are thrown. Creates nothing.
 */
export function readSecret(dataDir: string, name: string): { value: string | undefined; path: string } {
  const path = join(dataDir, name);
  try {
    const value = readFileSync(path, "utf8").trim();
    return { value: value === "" ? undefined : value, path };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    return { value: undefined, path };
  }
}

/**
 * Returns the secret stored in `<dataDir>/<name>`, creating it with `generate()` (mode 0600) when absent.
 * `created` tells the caller to log where it is; the value itself is never logged.
 */
export function loadOrCreateSecret(
  dataDir: string,
  name: string,
  generate: () => string,
): { value: string; path: string; created: boolean } {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const { value: stored, path } = readSecret(dataDir, name);
  if (stored !== undefined) return { value: stored, path, created: false };
  const value = generate();
  // "wx" fails if another process created it in between, rather than overwriting a secret in use.
  writeFileSync(path, `${value}\n`, { mode: 0o600, flag: "wx" });
  chmodSync(path, 0o600);
  return { value, path, created: true };
}

export const generateToken = () => randomBytes(32).toString("base64url");
export const generateWebhookSecret = () => `whsec_${randomBytes(32).toString("base64")}`;
