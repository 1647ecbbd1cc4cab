import assert from "node:assert/strict";
import { networkInterfaces } from "node:os";
import { after, describe, test } from "node:test";
import { canonicalAddress } from "../../src/proxy/route/upstream-check.js";
import { freePort } from "../../support/loopback.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { startUpstream, viaProxy } from "../helpers/http.js";
import { assertRefused, type Expected, sharedAgent } from "./refusals.js";

// Upstreams that would publish what must stay on the host: the cloud's metadata service and link-local
// addresses (HOSTKEEPER_UPSTREAM_DENY_CIDRS), the agent's own API, Caddy's admin endpoint and the
// operator's instances. The shared agent has the defaults: its API on 127.0.0.1:8626 (not listened on:
// the tests inject), operator ports 7101 and 7102, Caddy's admin on the test Caddy's loopback port.

const agent = sharedAgent(after);
const API = 8626;
const DENIED = /HOSTKEEPER_UPSTREAM_DENY_CIDRS/;
const OK = { dial: "127.0.0.1:9" };

/** `dial` refused in each place an upstream can be, by create and replace, naming that place. */
async function refusedEverywhere(dial: string, message: RegExp) {
  const a = await agent();
  const cases: [(d: string) => Record<string, unknown>, Expected][] = [
    [() => ({ upstreams: [{ dial }] }), ["body.upstreams[0].dial", message]],
    [() => ({ upstreams: [OK, { dial }] }), ["body.upstreams[1].dial", message]],
    [
      () => ({ paths: [{ prefix: "/p", upstreams: [OK, { dial }] }] }),
      ["body.paths[0].upstreams[1].dial", message],
    ],
  ];
  for (const [payload, expected] of cases) await assertRefused(a, payload, [expected]);
}

describe("denied ranges, however the address is spelt", () => {
  const forms: [string, RegExp][] = [
    ["169.254.169.254:80", DENIED],
    ["169.254.169.254.:80", DENIED],
    ["[::ffff:169.254.169.254]:80", DENIED],
    ["[::ffff:a9fe:a9fe]:80", DENIED],
    ["[0:0:0:0:0:ffff:a9fe:a9fe]:80", DENIED],
    ["[::169.254.169.254]:80", DENIED],
    ["[fe80::1]:80", DENIED],
    ["[FE80::1%lo]:80", DENIED],
    ["[fd00:ec2::254]:80", DENIED],
  ];
  for (const [dial, message] of forms)
    test(`${dial} is refused`, async () => refusedEverywhere(dial, message));

  // Numeric spellings of 169.254.169.254 are no dotted quad: the dial's syntax refuses them, before and
  // apart from the ranges (these pass without the ranges; they guard that no spelling slips between).
  const numeric = /IPv4 address in a shortened or non-decimal form|invalid host/;
  for (const dial of ["2852039166:80", "0xa9fea9fe:80", "0251.0376.0251.0376:80", "169.254.43518:80"])
    test(`${dial} is refused as a host`, async () => refusedEverywhere(dial, numeric));
});

describe("the agent's own ports, on any address of this host", () => {
  const api = /the agent's own API \(HOSTKEEPER_LISTEN\)/;
  const operator = /an operator instance's port \(HOSTKEEPER_OPERATOR_PORTS\)/;
  const forms: [string, RegExp][] = [
    [`127.0.0.1:${API}`, api],
    [`0.0.0.0:${API}`, api],
    [`[::]:${API}`, api],
    [`[::1]:${API}`, api],
    [`127.0.0.2:${API}`, api],
    [`[::ffff:127.0.0.1]:${API}`, api],
    [`[::ffff:7f00:1]:${API}`, api],
    // A name is judged by what it resolves to: localhost is the loopback.
    [`localhost:${API}`, /\(localhost resolves to it now\), the agent's own API/],
    [`LocalHost.:${API}`, api],
    ["127.0.0.1:7101", operator],
    ["[::1]:7102", operator],
    ["0.0.0.0:7101", operator],
  ];
  for (const [dial, message] of forms)
    test(`${dial} is refused`, async () => refusedEverywhere(dial, message));

  test("Caddy's admin endpoint is refused, by address and by name", async () => {
    const port = new URL((await agent()).caddy.adminUrl).port;
    for (const dial of [`127.0.0.1:${port}`, `localhost:${port}`])
      await refusedEverywhere(dial, /Caddy's admin endpoint \(HOSTKEEPER_CADDY_ADMIN\)/);
  });

  test("an address of this host's interfaces is this host", async (t) => {
    const own = Object.values(networkInterfaces())
      .flatMap((l) => l ?? [])
      .find((i) => i.family === "IPv4" && !i.internal);
    if (own === undefined) return t.skip("this host has no interface address besides the loopback");
    await refusedEverywhere(`${own.address}:${API}`, /the agent's own API/);
  });
});

describe("what stays allowed", () => {
  test("a loopback upstream, by address and by name, a private one, and a name that does not resolve", async (t) => {
    const a = await agent();
    const up = await startUpstream(t, "app");
    const dials = [`127.0.0.1:${up.port}`, `localhost:${up.port}`, "10.0.0.7:8080", "nothing.invalid:80"];
    for (const [i, dial] of dials.entries()) {
      const domain = `allowed${i}.test`;
      const res = await a.call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: { domain, upstreams: [{ dial }] },
      });
      assert.equal(res.statusCode, 201, `${dial}: ${res.body}`);
    }
    const answer = await viaProxy(a.caddy.httpPort, "allowed0.test");
    assert.deepEqual(answer, { status: 200, body: "app" });
  });
});

test("HOSTKEEPER_UPSTREAM_DENY_CIDRS replaces the default ranges; HOSTKEEPER_LISTEN moves the refused port", async (t) => {
  const caddy = await startCaddy(t);
  const api = await freePort();
  const h = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    // Even loopback can be denied when the operator says so.
    HOSTKEEPER_UPSTREAM_DENY_CIDRS: "10.0.0.0/8, fd12::/16, 127.0.0.1/32",
    HOSTKEEPER_LISTEN: `127.0.0.2:${api}`,
  });
  const write = async (domain: string, dial: string) =>
    h.call({ method: "POST", url: "/v1/proxy/routes", payload: { domain, upstreams: [{ dial }] } });
  const refused: [string, RegExp][] = [
    ["10.0.0.7:8080", /reaches 10\.0\.0\.7, in HOSTKEEPER_UPSTREAM_DENY_CIDRS/],
    ["[fd12::1]:80", /reaches fd12::1, in HOSTKEEPER_UPSTREAM_DENY_CIDRS/],
    [
      "localhost:80",
      /reaches 127\.0\.0\.1 \(localhost resolves to it now\), in HOSTKEEPER_UPSTREAM_DENY_CIDRS/,
    ],
    [`[::1]:${api}`, /reaches \[::1\]:\d+, the agent's own API/],
  ];
  for (const [dial, message] of refused) {
    const res = await write("refused.test", dial);
    assert.equal(res.statusCode, 400, `${dial}: ${res.body}`);
    assert.equal(res.json().errors[0].field, "body.upstreams[0].dial", dial);
    assert.match(res.json().errors[0].message, message, dial);
  }
  for (const [i, dial] of ["169.254.169.254:80", `[::1]:${API}`].entries())
    assert.equal((await write(`allowed${i}.test`, dial)).statusCode, 201, dial);
});

test("a restore of a captured route that dials a denied address is refused, naming the change", async (t) => {
  const a = await agent();
  const up = await startUpstream(t, "app");
  // Written in Caddy by hand, outside the API, then replaced through it: the replace captured it.
  const id = "by-hand.test";
  const byHand = {
    "@id": id,
    match: [{ host: [id] }],
    handle: [{ handler: "reverse_proxy", upstreams: [{ dial: "169.254.169.254:80" }] }],
  };
  await a.caddy.admin.write("POST", "/config/apps/http/servers/srv0/routes", byHand);
  const put = await a.call({
    method: "PUT",
    url: `/v1/proxy/routes/${id}`,
    payload: { domain: id, upstreams: [{ dial: `127.0.0.1:${up.port}` }] },
  });
  assert.equal(put.statusCode, 200, put.body);
  const history = await a.call({ method: "GET", url: `/v1/proxy/routes/${id}/history` });
  const change = history.json().changes[0].change_id as number;
  const res = await a.call({
    method: "POST",
    url: `/v1/proxy/routes/${id}/restore`,
    payload: { change_id: change },
  });
  assert.equal(res.statusCode, 400, res.body);
  const [error] = res.json().errors;
  assert.equal(error.field, "body.change_id");
  assert.match(
    error.message,
    /dials 169\.254\.169\.254:80, which reaches 169\.254\.169\.254, in HOSTKEEPER_UPSTREAM_DENY_CIDRS/,
  );
  assert.equal((await viaProxy(a.caddy.httpPort, id)).body, "app", "the route is still the replaced one");
});

test("addresses are compared in one form", () => {
  assert.equal(canonicalAddress("::ffff:169.254.169.254"), "169.254.169.254");
  assert.equal(canonicalAddress("::FFFF:A9FE:A9FE"), "169.254.169.254");
  assert.equal(canonicalAddress("::169.254.169.254"), "169.254.169.254");
  assert.equal(canonicalAddress("fe80::1%eth0"), "fe80::1");
  assert.equal(canonicalAddress("0:0:0:0:0:0:0:1"), "::1");
  assert.equal(canonicalAddress("10.0.0.7"), "10.0.0.7");
});
