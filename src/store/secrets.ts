import { randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

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
  const path = join(dataDir, name);
  try {
    const value = readFileSync(path, "utf8").trim();
    if (value !== "") return { value, path, created: false };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  const value = generate();
  // "wx" fails if another process created it in between, rather than overwriting a secret in use.
  writeFileSync(path, `${value}\n`, { mode: 0o600, flag: "wx" });
  chmodSync(path, 0o600);
  return { value, path, created: true };
}

export const generateToken = () => randomBytes(32).toString("base64url");
export const generateWebhookSecret = () => `whsec_${randomBytes(32).toString("base64")}`;
