/**
 * The agent's key pair (issue 37's identity): made once at the first start, 0600, the same at every start
 * after, shown as its public key and fingerprint by `/v1/status` and `hostkeeper connect show`, never
 * logged or answered; a file that holds no Ed25519 key stops the start with the reason.
 */
import assert from "node:assert/strict";
import { createHash, createPrivateKey, createPublicKey } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { test } from "node:test";
import pino from "pino";
import { runCli } from "../cli/support.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";

function tempDir(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-identity-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The public key and fingerprint of the stored private key, computed here from the file itself. */
function expectedOf(file: string) {
  const spki = createPublicKey(createPrivateKey(readFileSync(file, "utf8"))).export({
    format: "der",
    type: "spki",
  });
  const raw = spki.subarray(spki.length - 32);
  const digest = createHash("sha256").update(raw).digest("base64").replace(/=+$/, "");
  return { public_key: raw.toString("base64"), fingerprint: `SHA256:${digest}` };
}

test("made at the first start (0600), the same at the next, shown by /v1/status and connect show, never logged", async (t) => {
  const dataDir = tempDir(t);
  const caddy = await startCaddy(t);
  let logged = "";
  const logger = pino(
    { level: "debug" },
    new Writable({
      write(chunk, _enc, done) {
        logged += chunk.toString();
        done();
      },
    }),
  );
  const first = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl }, { dataDir, logger });
  const file = join(dataDir, "connect-key");
  assert.equal(statSync(file).mode & 0o777, 0o600);
  const pem = readFileSync(file, "utf8");
  assert.match(pem, /^-----BEGIN PRIVATE KEY-----\n/);
  const expected = expectedOf(file);
  const status = (await first.call({ method: "GET", url: "/v1/status" })).json();
  assert.deepEqual(status.connect, { ...expected, connection: null });
  assert.match(expected.fingerprint, /^SHA256:[A-Za-z0-9+/]{43}$/);
  assert.match(logged, /made the agent's key pair/);
  await first.app.close();

  const second = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl }, { dataDir, logger });
  assert.deepEqual((await second.call({ method: "GET", url: "/v1/status" })).json().connect, {
    ...expected,
    connection: null,
  });
  assert.equal(readFileSync(file, "utf8"), pem);
  // The private key's body appears in no log line and no answer.
  const body = pem.split("\n")[1] as string;
  assert.equal(logged.includes(body), false);
  assert.equal(JSON.stringify(status).includes(body), false);

  const shown = await runCli(["connect", "show", "--json"], { HOSTKEEPER_DATA_DIR: dataDir });
  assert.equal(shown.code, 0, shown.stderr);
  assert.deepEqual(JSON.parse(shown.stdout), { ...expected, key_file: file });
  const text = await runCli(["connect", "show"], { HOSTKEEPER_DATA_DIR: dataDir });
  assert.match(text.stdout, new RegExp(`^fingerprint +${expected.fingerprint.replace(/\+/g, "\\+")}$`, "m"));
  assert.equal(text.stdout.includes(body), false);
});

test("connect show before the first start says so (exit 1); a file without an Ed25519 key stops the start", async (t) => {
  const dataDir = tempDir(t);
  const none = await runCli(["connect", "show"], { HOSTKEEPER_DATA_DIR: dataDir });
  assert.equal(none.code, 1);
  assert.match(
    none.stderr,
    /connect-key does not exist yet: the agent makes its key pair at its first start/,
  );
  writeFileSync(join(dataDir, "connect-key"), "not a key\n", { mode: 0o600 });
  const caddy = await startCaddy(t);
  await assert.rejects(
    buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl }, { dataDir }),
    /connect-key holds no private key the agent can read/,
  );
});
