import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { buildTestApp } from "../helpers/app.js";
import { capturedLogger } from "../helpers/logs.js";
import { suiteCleanups } from "../helpers/suite.js";
import { waitFor } from "../helpers/wait.js";
import { DAY, type Entry, peerCertificate, testCa, tlsSetup } from "./support.js";

/** The operator's domain as set, and as the agent holds it (its route id). */
const OPERATOR = "op.Bücher.test.";
const OPERATOR_ID = "op.xn--bcher-kva.test";

// One agent and Caddy for all the cases: a refused certificate changes nothing, and the one taken has a
// name of its own.
describe("a custom certificate may not cover the operator's domain", () => {
  const suite = suiteCleanups();
  let s: Awaited<ReturnType<typeof tlsSetup>>;
  let ca: ReturnType<typeof testCa>;
  before(async () => {
    // No operator route yet: the rule holds before the operator was ever deployed.
    s = await tlsSetup(suite, [], { env: { HOSTKEEPER_OPERATOR_DOMAIN: OPERATOR } });
    ca = testCa(suite);
  });

  const put = (name: string, names: string[], cn?: string) => {
    const now = Date.now();
    const c = ca.issue(names, new Date(now - DAY), new Date(now + 20 * DAY), cn);
    return s.call({
      method: "PUT",
      url: `/v1/proxy/certificates/${name}`,
      payload: { certificate_pem: c.cert, key_pem: c.key },
    });
  };

  /** A PUT answered 409 naming the operator's domain and the name that covers it, and nothing loaded. */
  const refused = async (name: string, names: string[], coveredBy: string, cn?: string) => {
    const r = await put(name, names, cn);
    assert.equal(r.statusCode, 409, r.body);
    const problem = r.json() as Record<string, unknown>;
    assert.equal(problem.code, "operator_domain_reserved");
    assert.equal(problem.operator_domain, OPERATOR_ID);
    assert.equal(problem.covered_by, coveredBy);
    assert.match(
      String(problem.detail),
      new RegExp(`${coveredBy.replace(/[.*]/g, "\\$&")} covers ${OPERATOR_ID}`),
    );
    assert.equal((await s.call({ method: "GET", url: `/v1/proxy/certificates/${name}` })).statusCode, 404);
    const loaded = await s.caddy.admin.read("/config/apps/tls/certificates/load_files");
    assert.ok(!loaded.text.includes(`/${name}.`), `${name} is not loaded into Caddy`);
  };

  test("409 for a certificate naming the operator's domain", async () => {
    await refused("exact", ["shop.test", OPERATOR_ID], OPERATOR_ID);
  });

  test("409 for a wildcard covering it", async () => {
    await refused("wildcard", ["*.xn--bcher-kva.test"], "*.xn--bcher-kva.test");
  });

  test("409 for a wildcard of more labels, which Caddy's certificate lookup also tries", async () => {
    await refused("two-stars", ["*.*.test"], "*.*.test");
  });

  test("409 for the name in upper case with a trailing dot", async () => {
    await refused("spelled", ["OP.XN--BCHER-KVA.TEST."], "OP.XN--BCHER-KVA.TEST.");
  });

  test("409 for a CN naming it beside other subjectAltNames (Caddy serves a certificate for its CN too)", async () => {
    await refused("by-cn", ["shop.test"], OPERATOR_ID, OPERATOR_ID);
  });

  test("a certificate for deeper and unrelated names is taken, and served", async () => {
    await s.addRoute("a.op.bücher.test");
    // Issued first, as on a host whose sites run: an issuance still under way when a certificate is put
    // finishes into Caddy's cache after the reload and, an exact name, is served before the wildcard.
    await waitFor(
      "a.op.xn--bcher-kva.test to be issued",
      async () => (await s.entry("a.op.xn--bcher-kva.test"))?.status === "valid" || undefined,
      30_000,
    );
    const r = await put("deeper", ["*.op.xn--bcher-kva.test", "xn--bcher-kva.test", "other.test"]);
    assert.equal(r.statusCode, 201, r.body);
    const entry = r.json() as Entry;
    assert.equal(
      (await peerCertificate(s.tlsPort, "a.op.xn--bcher-kva.test")).serialNumber.toUpperCase(),
      entry.serial,
    );
  });
});

test("a certificate stored before the operator's domain was set stays loaded, with a warning at start", async (t) => {
  const s = await tlsSetup(t);
  const ca = testCa(t);
  const cert = ca.issue(
    ["*.xn--bcher-kva.test"],
    new Date(Date.now() - DAY),
    new Date(Date.now() + 10 * DAY),
  );
  const r = await s.call({
    method: "PUT",
    url: "/v1/proxy/certificates/before",
    payload: { certificate_pem: cert.cert, key_pem: cert.key },
  });
  assert.equal(r.statusCode, 201, r.body);
  await s.app.close();
  const { log, lines } = capturedLogger("warn");
  const again = await buildTestApp(
    t,
    { ...s.env, HOSTKEEPER_OPERATOR_DOMAIN: OPERATOR },
    { dataDir: s.config.agent.dataDir, logger: log },
  );
  await again.app.services.certificates.whenConformed();
  const warned = lines
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l.certificate === "before");
  assert.equal(warned.length, 1, lines.join("\n"));
  assert.equal(warned[0]?.name, "*.xn--bcher-kva.test");
  assert.equal(warned[0]?.operator_domain, OPERATOR_ID);
  assert.equal((await again.call({ method: "GET", url: "/v1/proxy/certificates/before" })).statusCode, 200);
});
