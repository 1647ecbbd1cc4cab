import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { DAY, peerCertificate, testCa, tlsSetup } from "../certificates/support.js";
import { TEST_TOKEN } from "../helpers/app.js";
import { waitFor } from "../helpers/wait.js";
import { problemLine, runCli } from "./support.js";

test("certs put, list, show and rm against a real agent and a Caddy serving TLS", async (t) => {
  const s = await tlsSetup(t);
  await s.app.listen({ host: "127.0.0.1", port: 0 });
  const port = (s.app.server.address() as AddressInfo).port;
  const env = {
    HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
    HOSTKEEPER_TOKEN: TEST_TOKEN,
    HOSTKEEPER_DATA_DIR: s.dataDir,
  };
  const cli = (...args: string[]) => runCli(args, env, { timeoutMs: 60_000 });
  await s.addRoute("cli.cert.test");

  const ca = testCa(t);
  const now = Date.now();
  const cert = ca.issue(["cli.cert.test"], new Date(now - DAY), new Date(now + 20 * DAY));
  const dir = mkdtempSync(join(tmpdir(), "hk-cli-cert-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "cert.pem"), cert.cert);
  writeFileSync(join(dir, "key.pem"), cert.key, { mode: 0o600 });

  const put = await cli("certs", "put", "cli-cert", join(dir, "cert.pem"), join(dir, "key.pem"));
  assert.equal(put.code, 0, put.stderr);
  assert.match(put.stdout, /^name +cli-cert$/m);
  assert.match(put.stdout, /^names +cli\.cert\.test$/m);
  assert.match(put.stdout, /^source +custom$/m);
  assert.ok(
    !put.stdout.includes("PRIVATE KEY") && !put.stderr.includes("PRIVATE KEY"),
    "the key is never printed",
  );
  const serial = /^serial +([0-9A-F]+)$/m.exec(put.stdout)?.[1];
  // Caddy serves it for its name.
  await waitFor("the custom certificate served", async () =>
    (await peerCertificate(s.tlsPort, "cli.cert.test")).serialNumber.toUpperCase() === serial
      ? true
      : undefined,
  );

  const listed = await cli("certs", "list");
  assert.equal(listed.code, 0, listed.stderr);
  const [header, ...rows] = listed.stdout.trimEnd().split("\n");
  assert.match(header ?? "", /^HOST +NAME +SOURCE +STATUS +NOT AFTER +ERROR$/);
  assert.ok(
    rows.some((r) => /^- +cli-cert +custom +valid +\S+ +-$/.test(r)),
    listed.stdout,
  );
  assert.ok(
    rows.some((r) => /^cli\.cert\.test +/.test(r)),
    listed.stdout,
  );
  const json = JSON.parse((await cli("certs", "list", "--json")).stdout) as {
    certificates: { name: string | null }[];
  };
  assert.ok(json.certificates.some((c) => c.name === "cli-cert"));

  const shown = await cli("certs", "show", "cli-cert");
  assert.equal(shown.code, 0, shown.stderr);
  assert.equal(shown.stdout, put.stdout);

  const missingKey = await cli("certs", "put", "cli-cert", join(dir, "cert.pem"), join(dir, "no-key.pem"));
  assert.equal(missingKey.code, 1);
  assert.match(missingKey.stderr, /cannot read .*no-key\.pem/);

  const removed = await cli("certs", "rm", "cli-cert");
  assert.equal(removed.code, 0, removed.stderr);
  assert.equal(removed.stdout, "deleted certificate cli-cert\n");
  const gone = await cli("certs", "show", "cli-cert");
  assert.equal(gone.code, 1);
  assert.equal(problemLine(gone.stderr).code, "certificate_not_found");
});
