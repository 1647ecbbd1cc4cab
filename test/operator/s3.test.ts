import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { Downloader } from "../../src/operator/artifacts/download.js";
import { ArtifactSource } from "../../src/operator/artifacts/source.js";
import { freePort } from "../../support/loopback.js";
import { buildTestApp } from "../helpers/app.js";
import { startArtifactServer, startS3Server } from "../helpers/artifact-servers.js";
import { startCaddy } from "../helpers/caddy.js";
import { startReceiver, viaProxy } from "../helpers/http.js";
import { makeTestCa } from "../helpers/tls.js";
import { fakeArtifact, instanceReaper, publish, updater } from "./support.js";

const creds = {
  accessKeyId: "AKIDHOSTKEEPERTEST",
  secretAccessKey: "s3cr3t/with+chars",
  region: "test-region-1",
};
const DOMAIN = "operator-s3.test";

test("operator updates from SigV4-signed object storage", { timeout: 60_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-s3-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const ca = makeTestCa(dir);
  const s3 = await startS3Server(t, ca, creds);
  const objects = new Map();
  const caddy = await startCaddy(t);
  const receiver = await startReceiver(t);
  const reaper = instanceReaper(t);
  // The agent reads the standard AWS_* environment; this file runs in its own process.
  process.env.AWS_ACCESS_KEY_ID = creds.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = creds.secretAccessKey;
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_OPERATOR_DOMAIN: DOMAIN,
    HOSTKEEPER_OPERATOR_PORTS: `${await freePort()},${await freePort()}`,
    HOSTKEEPER_OPERATOR_CA_FILE: ca.caFile,
    HOSTKEEPER_OPERATOR_ENV: reaper.env,
    HOSTKEEPER_OPERATOR_S3_ENDPOINT: s3.endpoint,
    HOSTKEEPER_OPERATOR_S3_REGION: creds.region,
    HOSTKEEPER_OPERATOR_S3_PATH_STYLE: "true",
    HOSTKEEPER_OPERATOR_CHECK_INTERVAL_MS: "50",
    HOSTKEEPER_OPERATOR_WATCH_MS: "200",
    HOSTKEEPER_OPERATOR_DRAIN_MS: "100",
    HOSTKEEPER_OPERATOR_DOWNLOAD_RETRIES: "1",
    HOSTKEEPER_OPERATOR_RETRY_DELAY_MS: "20",
  });
  for (const [version, name] of [
    ["1.0.0", "v1"],
    ["2.0.0", "v2"],
    ["3.0.0", "v3"],
  ] as const)
    publish(objects, "hk-releases/operator", version, fakeArtifact(name));
  for (const [key, file] of objects) s3.objects.set(key, file);

  const update = updater(call, receiver.url);
  const serving = async () => (await viaProxy(caddy.httpPort, DOMAIN)).body;

  await t.test("the test server refuses an unsigned request (it really checks)", async () => {
    const status = await new Promise<number>((resolve, reject) => {
      https
        .get(
          `${s3.endpoint}/hk-releases/operator/1.0.0/SHA256SUMS`,
          { ca: readFileSync(ca.caFile) },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        )
        .on("error", reject);
    });
    assert.equal(status, 403);
  });

  await t.test("s3://bucket/prefix, signed, installs v1", async () => {
    const before = s3.requests.length;
    const s = await update("s3-1", "1.0.0", "s3://hk-releases/operator");
    assert.equal(s.state, "completed", JSON.stringify(s.error));
    assert.equal(s.artifact_url, `${s3.endpoint}/hk-releases/operator/1.0.0/operator`);
    assert.equal(await serving(), "v1");
    const got = s3.requests.slice(before);
    assert.deepEqual(
      got.map((r) => [r.path, r.status]),
      [
        ["/hk-releases/operator/1.0.0/SHA256SUMS", 200],
        ["/hk-releases/operator/1.0.0/operator", 200],
      ],
    );
    assert.ok(got.every((r) => String(r.headers.authorization).startsWith("AWS4-HMAC-SHA256 ")));
  });

  await t.test("an https URL on the object-storage endpoint is signed too", async () => {
    const s = await update("s3-2", "2.0.0", `${s3.endpoint}/hk-releases/operator`);
    assert.equal(s.state, "completed", JSON.stringify(s.error));
    assert.equal(await serving(), "v2");
  });

  await t.test("a wrong secret fails the update with source_denied; v2 keeps serving", async () => {
    process.env.AWS_SECRET_ACCESS_KEY = "not-the-secret";
    try {
      const s = await update("s3-3", "3.0.0", "s3://hk-releases/operator");
      assert.equal(s.state, "failed");
      assert.equal(s.error.code, "source_denied");
      assert.match(s.error.message, /403/);
    } finally {
      process.env.AWS_SECRET_ACCESS_KEY = creds.secretAccessKey;
    }
    assert.equal(await serving(), "v2");
    assert.equal(reaper.alive().length, 1);
  });

  await t.test("credentials are never sent to a host other than the endpoint", async () => {
    const other = await startArtifactServer(t, ca);
    other.files.set("/x/1/SHA256SUMS", { body: Buffer.from("sums") });
    const source = new ArtifactSource({
      allowHttp: false,
      s3Endpoint: s3.endpoint,
      s3Region: creds.region,
      s3PathStyle: true,
      env: { AWS_ACCESS_KEY_ID: creds.accessKeyId, AWS_SECRET_ACCESS_KEY: creds.secretAccessKey },
    });
    const downloader = new Downloader({
      source,
      extraCa: readFileSync(ca.caFile, "utf8"),
      maxBytes: 1024,
      idleTimeoutMs: 5000,
      totalTimeoutMs: 5000,
      retries: 0,
      retryDelayMs: 0,
    });
    const text = await downloader.text(
      new URL(`${other.url}/x/1/SHA256SUMS`),
      1024,
      new AbortController().signal,
    );
    assert.equal(text, "sums");
    assert.equal(other.requests[0]?.headers.authorization, undefined);
    assert.equal(other.requests[0]?.headers["x-amz-date"], undefined);
  });
});
