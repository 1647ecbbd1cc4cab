/**
 * The self-update API outside the packaged service (what `npm start` runs): refused with a problem that
 * says why, before anything is fetched. The whole flow, against real packages and systemd, is in
 * test/packaging/self-update.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { minisignKeypair } from "../helpers/minisign.js";

/** A minisign public key line made by the real tool. */
function publicKeyLine(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-au-key-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return minisignKeypair(dir, "k").line;
}

test("without update keys, self-update is refused and says how to set it up", async (t) => {
  const caddy = await startCaddy(t);
  const { call } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  const res = await call({ method: "POST", url: "/v1/agent/update", payload: { version: "9.9.9" } });
  assert.equal(res.statusCode, 409);
  const body = res.json();
  assert.equal(body.code, "agent_update_not_configured", res.body);
  assert.match(body.detail, /HOSTKEEPER_AGENT_UPDATE_KEYS/);
});

test("outside the packaged service, self-update is refused: it needs hostkeeper.service", async (t) => {
  const caddy = await startCaddy(t);
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_AGENT_UPDATE_KEYS: publicKeyLine(t),
    HOSTKEEPER_AGENT_UPDATE_SOURCE: "https://releases.invalid/hostkeeper",
  });
  const res = await call({ method: "POST", url: "/v1/agent/update", payload: { version: "9.9.9" } });
  assert.equal(res.statusCode, 409, res.body);
  assert.equal(res.json().code, "agent_update_unsupported", res.body);
  assert.match(res.json().detail, /needs the packaged service .*not from \/usr\/lib\/hostkeeper/);
  // Nothing was recorded: the status has no update, and no id answers.
  const status = await call({ method: "GET", url: "/v1/status" });
  assert.equal(status.json().agent_update, null);
  const missing = await call({ method: "GET", url: "/v1/agent/update/au_0123456789abcdef" });
  assert.equal(missing.statusCode, 404);
  assert.equal(missing.json().code, "agent_update_not_found");
});

test("a request is checked against its schema before anything else", async (t) => {
  const caddy = await startCaddy(t);
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_AGENT_UPDATE_KEYS: publicKeyLine(t),
  });
  for (const payload of [
    // A last segment that would name a file outside the update's folder once decoded.
    { url: "https://releases.test/x/..%2F..%2F..%2Fetc%2Fcron.d%2Fx.deb" },
    { url: "https://releases.test/x/.hidden.deb" },
    { url: "https://releases.test/x/pkg.deb?x=1" },
    { version: "../1" },
    { version: "1.0.0", checksum: "abc" },
    { url: 7 },
    { bogus: 1 },
  ]) {
    const res = await call({ method: "POST", url: "/v1/agent/update", payload });
    assert.equal(res.statusCode, 400, JSON.stringify(payload));
  }
});
