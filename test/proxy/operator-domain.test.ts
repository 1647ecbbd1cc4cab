import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, describe, test } from "node:test";
import type { Response } from "light-my-request";
import { buildTestApp, type TestApp } from "../helpers/app.js";
import { startCaddy, type TestCaddy } from "../helpers/caddy.js";
import { startUpstream, viaProxy } from "../helpers/http.js";
import { suiteCleanups } from "../helpers/suite.js";
import { route } from "./support.js";

/** The operator's domain as set, and as the agent holds it (its route id). */
const OPERATOR = "op.Bücher.test.";
const OPERATOR_ID = "op.xn--bcher-kva.test";

/** A 409 naming the operator's domain and what covers it. */
function assertReserved(res: Response, coveredBy: string | null): string {
  assert.equal(res.statusCode, 409, res.body);
  const problem = res.json() as Record<string, unknown>;
  assert.equal(problem.code, "operator_domain_reserved");
  assert.equal(problem.operator_domain, OPERATOR_ID);
  assert.equal(problem.covered_by, coveredBy);
  assert.match(
    String(problem.detail),
    new RegExp(`covers ${OPERATOR_ID.replace(/\./g, "\\.")}, the operator's`),
  );
  return String(problem.detail);
}

const ids = async (h: TestApp): Promise<string[]> =>
  (await h.call({ method: "GET", url: "/v1/proxy/routes" })).json().map((r: { "@id": string }) => r["@id"]);

// One agent and Caddy for the write cases: a refused write changes nothing, and each taken one has a
// domain of its own. No operator route is in Caddy: the rule holds before the operator was ever deployed.
describe("a route write may not make a route answer for the operator's domain", () => {
  const suite = suiteCleanups();
  let caddy: TestCaddy;
  let h: TestApp;
  let upPort: number;
  let n = 0;
  before(async () => {
    caddy = await startCaddy(suite);
    h = await buildTestApp(suite, {
      HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
      HOSTKEEPER_OPERATOR_DOMAIN: OPERATOR,
    });
    upPort = (await startUpstream(suite, "u")).port;
    const site = await h.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: route("site.test", upPort),
    });
    assert.equal(site.statusCode, 201, site.body);
  });

  /** Sends a write; it must be refused, leave the routes as they were, and send the operator's host nowhere. */
  const refusedWrite = async (method: "POST" | "PUT", url: string, payload: unknown, coveredBy: string) => {
    const before = await ids(h);
    const detail = assertReserved(await h.call({ method, url, payload }), coveredBy);
    assert.deepEqual(await ids(h), before, "no route was written");
    const answer = await viaProxy(caddy.httpPort, OPERATOR_ID);
    assert.ok(answer.status !== 308 && answer.body !== "u", "no route answers for the operator's host");
    return detail;
  };

  for (const spelling of [OPERATOR_ID, "OP.BÜCHER.TEST.", "op。bücher。test", "Op.XN--BCHER-KVA.Test"])
    test(`409 for a create with redirect_from ${spelling}`, async () => {
      const detail = await refusedWrite(
        "POST",
        "/v1/proxy/routes",
        route(`r${++n}.test`, upPort, { redirect_from: ["www.r.test", spelling] }),
        OPERATOR_ID,
      );
      assert.match(detail, /^redirect_from\[1\]/);
    });

  for (const spelling of ["*.xn--bcher-kva.test", "*.BÜCHER.test."])
    test(`409 for a wildcard domain ${spelling} covering it`, async () => {
      const detail = await refusedWrite(
        "POST",
        "/v1/proxy/routes",
        route(spelling, upPort),
        "*.xn--bcher-kva.test",
      );
      assert.match(detail, /^domain /);
    });

  test("409 for a replace that adds the operator's domain to redirect_from", async () => {
    const was = (await h.call({ method: "GET", url: "/v1/proxy/routes/site.test" })).json();
    await refusedWrite(
      "PUT",
      "/v1/proxy/routes/site.test",
      route("site.test", upPort, { redirect_from: ["OP.bücher.test"] }),
      OPERATOR_ID,
    );
    assert.deepEqual((await h.call({ method: "GET", url: "/v1/proxy/routes/site.test" })).json(), was);
  });

  test("a create of the operator's domain itself, in any spelling, is still 409 route_exists", async () => {
    const res = await h.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: route("OP.bücher.TEST", upPort),
    });
    assert.equal(res.statusCode, 409, res.body);
    assert.equal(res.json().code, "route_exists");
  });

  test("deeper, parent and unrelated names are taken", async () => {
    for (const payload of [
      route("*.op.bücher.test", upPort),
      route("*.other.test", upPort),
      route("b.test", upPort, { redirect_from: ["bücher.test", "a.op.bücher.test"] }),
    ]) {
      const res = await h.call({ method: "POST", url: "/v1/proxy/routes", payload });
      assert.equal(res.statusCode, 201, res.body);
    }
    assert.equal((await viaProxy(caddy.httpPort, "x.op.xn--bcher-kva.test")).body, "u");
  });
});

// The changes to restore were made by an agent that had no operator's domain; the next agent has one.
describe("a restore may not put back a route that answers for the operator's domain", () => {
  const suite = suiteCleanups();
  let h: TestApp;
  const change: Record<string, number> = {};
  const restore = (id: string, changeId: number | undefined) =>
    h.call({ method: "POST", url: `/v1/proxy/routes/${id}/restore`, payload: { change_id: changeId } });

  before(async () => {
    const caddy = await startCaddy(suite);
    const dataDir = mkdtempSync(join(tmpdir(), "hk-data-"));
    suite.after(() => rmSync(dataDir, { recursive: true, force: true }));
    const upPort = (await startUpstream(suite, "u")).port;
    // Closed below (its own cleanups run), before the next agent opens the same database.
    const closers: (() => unknown)[] = [];
    const first = await buildTestApp(
      { after: (fn: () => unknown) => closers.push(fn) },
      { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl },
      { dataDir },
    );
    const lastChange = async (id: string): Promise<number> =>
      (await first.call({ method: "GET", url: `/v1/proxy/routes/${id}/history?limit=1` })).json().changes[0]
        .change_id;
    const write = async (method: string, url: string, payload?: unknown) => {
      const res = await first.call({ method, url, payload });
      assert.ok(res.statusCode < 300, `${method} ${url}: ${res.statusCode} ${res.body}`);
    };
    // A wildcard over the operator's domain, created then deleted: restoring the delete re-creates it.
    await write("POST", "/v1/proxy/routes", route("*.bücher.test", upPort));
    await write("DELETE", "/v1/proxy/routes/*.xn--bcher-kva.test");
    change.wildcard = await lastChange("*.xn--bcher-kva.test");
    // A route that redirected the operator's domain for a while: restoring the replace that ended it
    // puts the redirect back.
    await write("POST", "/v1/proxy/routes", route("r.test", upPort));
    await write("PUT", "/v1/proxy/routes/r.test", route("r.test", upPort, { redirect_from: [OPERATOR] }));
    change.redirecting = await lastChange("r.test");
    await write("PUT", "/v1/proxy/routes/r.test", route("r.test", upPort));
    change.redirectEnded = await lastChange("r.test");
    // A route written by hand without a host matcher (it takes every host), deleted through the API.
    const planted = await caddy.admin.raw("POST", "/config/apps/http/servers/srv0/routes", {
      body: JSON.stringify({ "@id": "any.test", handle: [{ handler: "static_response", body: "any" }] }),
    });
    assert.equal(planted.status, 200, planted.text);
    await write("DELETE", "/v1/proxy/routes/any.test");
    change.catchAll = await lastChange("any.test");
    for (const close of closers.reverse()) await close();

    h = await buildTestApp(
      suite,
      { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, HOSTKEEPER_OPERATOR_DOMAIN: OPERATOR },
      { dataDir },
    );
  });

  test("409 for re-creating a wildcard that covers it", async () => {
    assertReserved(await restore("*.xn--bcher-kva.test", change.wildcard), "*.xn--bcher-kva.test");
    assert.equal(
      (await h.call({ method: "GET", url: "/v1/proxy/routes/*.xn--bcher-kva.test" })).statusCode,
      404,
    );
  });

  test("409 for putting back a redirect from it", async () => {
    const now = (await h.call({ method: "GET", url: "/v1/proxy/routes/r.test" })).json();
    assertReserved(await restore("r.test", change.redirectEnded), OPERATOR_ID);
    assert.deepEqual((await h.call({ method: "GET", url: "/v1/proxy/routes/r.test" })).json(), now);
  });

  test("409 for re-creating a route without a host matcher", async () => {
    assertReserved(await restore("any.test", change.catchAll), null);
    assert.equal((await h.call({ method: "GET", url: "/v1/proxy/routes/any.test" })).statusCode, 404);
  });

  test("a restore of a state that does not answer for it applies", async () => {
    const res = await restore("r.test", change.redirecting);
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().action, "replaced");
  });
});
