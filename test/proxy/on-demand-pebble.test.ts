import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import http from "node:http";
import { test } from "node:test";
import { ON_DEMAND_POLICY_ID } from "../../src/caddy/on-demand.js";
import { waitFor } from "../helpers/wait.js";
import { acmeSetup, served } from "./acme-support.js";

/** What the agent's permission endpoint (the one Caddy's config names) answers for `domain`. */
function ask(endpoint: string, domain: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(`${endpoint}?domain=${encodeURIComponent(domain)}`, (res) => {
        let body = "";
        res.on("data", (c: Buffer) => {
          body += c.toString();
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on("error", reject);
  });
}

test("a wildcard route's hosts get certificates of their own from pebble on their first handshake, within the per-route limit; no order for a host refused", {
  timeout: 120_000,
}, async (t) => {
  const s = await acmeSetup(t, "tls-alpn-01", { HOSTKEEPER_ON_DEMAND_MAX_PER_ROUTE: "2" });
  await s.addRoute("*.preview.acme.test");
  const automation = JSON.parse((await s.caddy.admin.read("/config/apps/tls/automation")).text) as {
    policies: { "@id"?: string; subjects?: string[]; on_demand?: boolean }[];
    on_demand: { permission: { module: string; endpoint: string } };
  };
  const policy = automation.policies.find((p) => p["@id"] === ON_DEMAND_POLICY_ID);
  assert.deepEqual(policy?.subjects, ["*.preview.acme.test"]);
  assert.equal(policy?.on_demand, true);
  const { endpoint } = automation.on_demand.permission;
  assert.match(endpoint, /^http:\/\/127\.0\.0\.1:\d+\/on-demand\/[0-9a-f]{48}$/);

  for (const host of ["a.preview.acme.test", "b.preview.acme.test"]) {
    const cert = await waitFor(
      `pebble's certificate for ${host}`,
      async () => {
        const c = await served(s.tlsPort, host).catch(() => undefined);
        return c?.issuer.includes("Pebble Intermediate CA") ? c : undefined;
      },
      60_000,
    );
    assert.equal(cert.subjectAltName, `DNS:${host}`, "a certificate of the host's own, not the wildcard's");
  }
  // The certificates list shows each allowed host with its own certificate.
  for (const host of ["a.preview.acme.test", "b.preview.acme.test"]) {
    const e = await waitFor(`${host} valid in the list`, async () => {
      const got = await s.entry(host);
      return got?.status === "valid" ? got : undefined;
    });
    assert.deepEqual([e.source, e.names], ["acme", [host]]);
  }
  // The third host of the route is past the limit; a host no route serves is no route's.
  await assert.rejects(served(s.tlsPort, "c.preview.acme.test"));
  await assert.rejects(served(s.tlsPort, "x.elsewhere.acme.test"));
  assert.deepEqual(await ask(endpoint, "c.preview.acme.test"), { status: 403, body: "route_limit" });
  assert.deepEqual(await ask(endpoint, "x.elsewhere.acme.test"), { status: 403, body: "no_route" });
  // Allowed hosts stay allowed (Caddy asks again after a restart, before loading from storage).
  assert.deepEqual(await ask(endpoint, "a.preview.acme.test"), { status: 200, body: "allowed_before" });
  // The endpoint answers its one path and nothing else, whatever token comes with it.
  const root = new URL(endpoint);
  assert.equal((await ask(`${root.origin}/v1/proxy/routes`, "a.preview.acme.test")).status, 404);
  // Caddy placed an order for the allowed hosts only.
  const caddyLog = readFileSync(s.log, "utf8");
  assert.match(caddyLog, /"identifier":"a\.preview\.acme\.test"/);
  assert.doesNotMatch(caddyLog, /"identifier":"c\.preview\.acme\.test"/);
  assert.doesNotMatch(caddyLog, /"identifier":"x\.elsewhere\.acme\.test"/);

  // The route deleted: the policy goes once no change is queued, and its count with it.
  const gone = await s.call({
    method: "DELETE",
    url: `/v1/proxy/routes/${encodeURIComponent("*.preview.acme.test")}`,
  });
  assert.equal(gone.statusCode, 204, gone.body);
  await s.app.services.writer.whenIdle();
  const policies = JSON.parse((await s.caddy.admin.read("/config/apps/tls/automation/policies")).text) as {
    "@id"?: string;
  }[];
  assert.equal(policies.filter((p) => p["@id"] === ON_DEMAND_POLICY_ID).length, 0);
  assert.deepEqual(await ask(endpoint, "c.preview.acme.test"), { status: 403, body: "no_route" });
});
