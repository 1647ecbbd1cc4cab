import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Grant } from "../../src/access/scopes.js";
import { buildTestApp, type TestApp } from "../helpers/app.js";
import { startCaddy, type TestCaddy } from "../helpers/caddy.js";

type After = { after: (fn: () => unknown) => void };

export const OPERATOR_DOMAIN = "ops.example.test";

/**
 * The agent listening on loopback against a real Caddy, for tests that send hostile requests. Should one of
 * them ever get through to a handler it must not reach, it still cannot touch this host: the package
 * manager is dnf in an empty install root and the reboot command is `true`.
 */
export async function startGuardedAgent(
  t: After,
  env: Record<string, string> = {},
  opts: { now?: () => number } = {},
): Promise<TestApp & { port: number; caddy: TestCaddy }> {
  const caddy = await startCaddy(t);
  const root = mkdtempSync(join(tmpdir(), "hk-empty-root-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const h = await buildTestApp(
    t,
    {
      HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
      HOSTKEEPER_OPERATOR_DOMAIN: OPERATOR_DOMAIN,
      HOSTKEEPER_PACKAGE_MANAGER: "dnf",
      HOSTKEEPER_DNF_INSTALLROOT: root,
      HOSTKEEPER_REBOOT_COMMAND: "true",
      HOSTKEEPER_OPERATOR_COMMUNITY_SOURCE: "https://127.0.0.1:9/releases",
      // These tests send thousands of refused requests on purpose; the limit on them has its own test.
      HOSTKEEPER_AUTH_FAILURE_BURST: "100000",
      ...env,
    },
    opts,
  );
  await h.app.listen({ host: "127.0.0.1", port: 0 });
  return { ...h, port: (h.app.server.address() as AddressInfo).port, caddy };
}

/** A concrete path for a registered route pattern: each `:param` gets a value the route's schema accepts. */
export function concretePath(pattern: string, value = "example.test"): string {
  return pattern.replace(/:[A-Za-z_]+/g, value);
}

export interface NamedToken {
  name: string;
  scopes: readonly Grant[];
  secret: string;
  not_after?: string;
}

export const secretOf = (name: string) => `secret-of-${name}-0123456789abcdef`;
export const sha256Hex = (s: string) => createHash("sha256").update(s).digest("hex");

/** A tokens file (in a temp dir removed when the test ends) holding `tokens` as the agent expects them. */
export function writeTokensFile(t: After, tokens: readonly NamedToken[], path?: string): string {
  let file = path;
  if (file === undefined) {
    const dir = mkdtempSync(join(tmpdir(), "hk-tokens-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    file = join(dir, "tokens.json");
  }
  const body = {
    tokens: tokens.map((k) => ({
      name: k.name,
      sha256: sha256Hex(k.secret),
      scopes: k.scopes,
      ...(k.not_after ? { not_after: k.not_after } : {}),
    })),
  };
  writeFileSync(file, JSON.stringify(body), { mode: 0o600 });
  return file;
}
