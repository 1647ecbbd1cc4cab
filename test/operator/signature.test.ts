import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { parseTrustedKey } from "../../src/operator/artifacts/minisign.js";
import { loadConfig } from "../../src/settings.js";
import { freePort } from "../../support/loopback.js";
import { buildTestApp } from "../helpers/app.js";
import type { HostedFile } from "../helpers/artifact-servers.js";
import { startArtifactServer, startS3Server } from "../helpers/artifact-servers.js";
import { startCaddy } from "../helpers/caddy.js";
import { startReceiver, viaProxy } from "../helpers/http.js";
import { type MinisignKey, minisignKeypair } from "../helpers/minisign.js";
import { makeTestCa } from "../helpers/tls.js";
import { fakeArtifact, instanceReaper, sha256, updater } from "./support.js";

const DOMAIN = "operator-signed.test";
const creds = { accessKeyId: "AKIDHOSTKEEPERSIGN", secretAccessKey: "sign-secret", region: "test-region-1" };

/** The `.minisig` the real minisign writes for `body` (prehashed unless `legacy`). */
function sign(dir: string, key: MinisignKey, body: Buffer, comment: string, legacy = false): Buffer {
  const file = join(dir, `to-sign-${Math.random().toString(36).slice(2)}`);
  writeFileSync(file, body);
  execFileSync("minisign", ["-S", ...(legacy ? ["-l"] : []), "-s", key.sec, "-m", file, "-t", comment], {
    stdio: "pipe",
  });
  return readFileSync(`${file}.minisig`);
}

const sumsOf = (artifact: Buffer) =>
  Buffer.from(`${sha256(Buffer.from("x"))}  other\n${sha256(artifact)}  operator\n`);

test("signed operator artifacts: minisign signatures decide what runs", { timeout: 120_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-sig-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const release = minisignKeypair(dir, "release");
  const second = minisignKeypair(dir, "second");
  const stranger = minisignKeypair(dir, "stranger");
  const ca = makeTestCa(dir);
  const artifacts = await startArtifactServer(t, ca);
  const s3 = await startS3Server(t, ca, creds);
  const caddy = await startCaddy(t);
  const receiver = await startReceiver(t);
  const reaper = instanceReaper(t);
  // This file runs in its own process: the agent reads the standard AWS_* environment.
  process.env.AWS_ACCESS_KEY_ID = creds.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = creds.secretAccessKey;
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_OPERATOR_DOMAIN: DOMAIN,
    HOSTKEEPER_OPERATOR_PORTS: `${await freePort()},${await freePort()}`,
    HOSTKEEPER_OPERATOR_CA_FILE: ca.caFile,
    HOSTKEEPER_OPERATOR_ENV: reaper.env,
    // A whole minisign.pub (comment line included) and a bare key line, newline- and comma-separated.
    HOSTKEEPER_OPERATOR_TRUSTED_KEYS: `${release.pub}\n,${second.line}`,
    HOSTKEEPER_OPERATOR_S3_ENDPOINT: s3.endpoint,
    HOSTKEEPER_OPERATOR_S3_REGION: creds.region,
    HOSTKEEPER_OPERATOR_S3_PATH_STYLE: "true",
    HOSTKEEPER_OPERATOR_CHECK_INTERVAL_MS: "50",
    HOSTKEEPER_OPERATOR_WATCH_MS: "200",
    HOSTKEEPER_OPERATOR_DRAIN_MS: "100",
    HOSTKEEPER_OPERATOR_DOWNLOAD_RETRIES: "0",
  });
  const httpsSource = `${artifacts.url}/releases`;
  const update = updater(call, receiver.url);
  const serving = async () => (await viaProxy(caddy.httpPort, DOMAIN)).body;
  /** Publishes `<version>/operator` on the https server with the files `extra` gives. */
  const onHttps = (version: string, files: Record<string, Buffer>) => {
    for (const [name, body] of Object.entries(files))
      artifacts.files.set(`/releases/${version}/${name}`, { body } satisfies HostedFile);
  };
  const failsWith = async (id: string, version: string, code: string, source = httpsSource) => {
    const before = await serving();
    const s = await update(id, version, source);
    assert.equal(s.state, "failed", JSON.stringify(s));
    assert.equal(s.error.code, code, s.error.message);
    assert.equal(s.signature, null);
    assert.equal(await serving(), before, "the old version keeps serving");
    assert.equal(reaper.alive().length, 1);
    return s;
  };

  await t.test(
    "an artifact with its own .minisig by a trusted key installs; the trusted comment is shown",
    async () => {
      const v1 = fakeArtifact("v1");
      const minisig = sign(dir, release, v1, "hostkeeper-operator 1.0.0 built by release CI");
      onHttps("1.0.0", { operator: v1, "operator.minisig": minisig });
      const s = await update("sig-1", "1.0.0", httpsSource);
      assert.equal(s.state, "completed", JSON.stringify(s.error));
      const keyId = /public key ([0-9A-F]{1,16})$/m.exec(release.pub)?.[1];
      assert.deepEqual(s.signature, {
        key_id: keyId,
        signed_file: "operator",
        trusted_comment: "hostkeeper-operator 1.0.0 built by release CI",
      });
      assert.equal(await serving(), "v1");
    },
  );

  await t.test("a signed SHA256SUMS in an s3 bucket covers the artifact (second trusted key)", async () => {
    const v2 = fakeArtifact("v2");
    const sums = sumsOf(v2);
    for (const [name, body] of Object.entries({
      operator: v2,
      SHA256SUMS: sums,
      "SHA256SUMS.minisig": sign(dir, second, sums, "release 2.0.0"),
    }))
      s3.objects.set(`hk-signed/operator/2.0.0/${name}`, { body });
    const s = await update("sig-2", "2.0.0", "s3://hk-signed/operator");
    assert.equal(s.state, "completed", JSON.stringify(s.error));
    assert.equal(s.signature.signed_file, "SHA256SUMS");
    assert.equal(s.signature.trusted_comment, "release 2.0.0");
    assert.equal(await serving(), "v2");
  });

  await t.test("no signature at all (a correct SHA256SUMS only): signature_missing", async () => {
    const v3 = fakeArtifact("v3");
    onHttps("3.0.0", { operator: v3, SHA256SUMS: sumsOf(v3) });
    const s = await failsWith("sig-3", "3.0.0", "signature_missing");
    assert.match(s.error.message, /operator\.minisig/);
  });

  await t.test("a signature by a key that is not trusted: signature_unknown_key", async () => {
    const v4 = fakeArtifact("v4");
    onHttps("4.0.0", { operator: v4, "operator.minisig": sign(dir, stranger, v4, "looks official") });
    await failsWith("sig-4", "4.0.0", "signature_unknown_key");
  });

  await t.test("an altered trusted comment or signature: signature_invalid", async () => {
    const v5 = fakeArtifact("v5");
    const good = sign(dir, release, v5, "release 5.0.0").toString("utf8");
    onHttps("5.0.0", {
      operator: v5,
      "operator.minisig": Buffer.from(good.replace("release 5.0.0", "release 5.0.0 (security fix)")),
    });
    await failsWith("sig-5", "5.0.0", "signature_invalid");
    onHttps("5.0.1", {
      operator: v5,
      "operator.minisig": Buffer.from("untrusted comment: x\nnot base64!\n"),
    });
    await failsWith("sig-5b", "5.0.1", "signature_invalid");
  });

  await t.test("a legacy (not prehashed) signature is refused: signature_invalid", async () => {
    const v6 = fakeArtifact("v6");
    onHttps("6.0.0", { operator: v6, "operator.minisig": sign(dir, release, v6, "legacy", true) });
    const s = await failsWith("sig-6", "6.0.0", "signature_invalid");
    assert.match(s.error.message, /legacy/);
  });

  await t.test("an artifact changed after signing: signature_mismatch", async () => {
    const v7 = fakeArtifact("v7");
    const evil = fakeArtifact("evil");
    // Its own signature no longer matches.
    onHttps("7.0.0", { operator: evil, "operator.minisig": sign(dir, release, v7, "release 7.0.0") });
    await failsWith("sig-7", "7.0.0", "signature_mismatch");
    // The signed SHA256SUMS lists the original.
    const sums = sumsOf(v7);
    onHttps("7.0.1", {
      operator: evil,
      SHA256SUMS: sums,
      "SHA256SUMS.minisig": sign(dir, release, sums, "7.0.1"),
    });
    await failsWith("sig-7b", "7.0.1", "signature_mismatch");
    // SHA256SUMS rewritten to list the changed artifact, under the old signature.
    onHttps("7.0.2", {
      operator: evil,
      SHA256SUMS: sumsOf(evil),
      "SHA256SUMS.minisig": sign(dir, release, sums, "7.0.2"),
    });
    await failsWith("sig-7c", "7.0.2", "signature_mismatch");
  });
});

test("HOSTKEEPER_OPERATOR_TRUSTED_KEYS: key lines or whole minisign.pub files; anything else is refused", () => {
  const dir = mkdtempSync(join(tmpdir(), "hk-sig-keys-"));
  try {
    const a = minisignKeypair(dir, "a");
    const b = minisignKeypair(dir, "b");
    const load = (raw: unknown) =>
      loadConfig({ env: {}, file: { operatorTrustedKeys: raw } }).operator.trustedKeys;
    assert.deepEqual(
      load([a.line, b.pub]),
      [a.line, b.line],
      "a config-file list, a .pub file's text included",
    );
    assert.deepEqual(
      loadConfig({ env: { HOSTKEEPER_OPERATOR_TRUSTED_KEYS: `${a.line}, ${b.line}` } }).operator.trustedKeys,
      [a.line, b.line],
    );
    assert.throws(() => load("RWQnotakey"), /operatorTrustedKeys .*is not a minisign public key/);
    assert.throws(() => load(`${a.line},${a.line}`), /the same key id twice/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a key id is shown as minisign prints it: hex of its little-endian number, without leading zeros", () => {
  const dir = mkdtempSync(join(tmpdir(), "hk-sig-id-"));
  try {
    const raw = Buffer.from(minisignKeypair(dir, "k").line, "base64");
    // The id's most significant byte (stored last) made 0x0A: minisign prints 15 digits, not 16.
    raw[9] = 0x0a;
    const id = parseTrustedKey(raw.toString("base64")).id;
    assert.match(id, /^A[0-9A-F]{14}$/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
