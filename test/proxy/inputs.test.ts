import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { withoutPaths } from "../../src/util/without-paths.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { startUpstream, viaProxy } from "../helpers/http.js";

async function setup(t: Parameters<typeof startCaddy>[0]) {
  const caddy = await startCaddy(t);
  const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  return { caddy, ...h };
}

/** A domain of exactly `length` characters: 63-character labels and a short last one. */
function domainOfLength(length: number): string {
  const labels: string[] = [];
  let left = length;
  let i = 0;
  while (left > 0) {
    const n = Math.min(63, left === 64 ? 62 : left);
    labels.push(String.fromCharCode(97 + (i++ % 26)).repeat(n));
    left -= n + 1;
  }
  const d = labels.join(".");
  assert.equal(d.length, length);
  return d;
}

describe("long route ids work end to end", () => {
  for (const [name, domain] of [
    ["126 characters", domainOfLength(126)],
    ["253 characters", domainOfLength(253)],
    ["a wildcard of 253 characters", `*.${domainOfLength(253)}`],
  ] as const) {
    test(`${name}: create, list, replace, delete`, async (t) => {
      const { call } = await setup(t);
      const body = (port: number) => ({ domain, upstreams: [{ dial: `127.0.0.1:${port}` }] });
      let res = await call({ method: "POST", url: "/v1/proxy/routes", payload: body(9001) });
      assert.equal(res.statusCode, 201, res.body);
      const id = res.json()["@id"];
      assert.equal(id, domain);
      const listed = (await call({ method: "GET", url: "/v1/proxy/routes" })).json();
      assert.deepEqual(
        listed.map((r: { "@id": string }) => r["@id"]),
        [id],
      );
      res = await call({
        method: "PUT",
        url: `/v1/proxy/routes/${encodeURIComponent(id)}`,
        payload: body(9002),
      });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().handle[0].upstreams[0].dial, "127.0.0.1:9002");
      res = await call({ method: "DELETE", url: `/v1/proxy/routes/${encodeURIComponent(id)}` });
      assert.equal(res.statusCode, 204, res.body);
      assert.deepEqual((await call({ method: "GET", url: "/v1/proxy/routes" })).json(), []);
    });
  }

  test("ids past the documented 256 characters are 400, and a long update id is 404 or 400, never 414", async (t) => {
    const { call } = await setup(t);
    for (const method of ["PUT", "DELETE"]) {
      const res = await call({
        method,
        url: `/v1/proxy/routes/${"a".repeat(257)}`,
        payload: method === "PUT" ? { domain: "a.test", upstreams: [{ dial: "127.0.0.1:9" }] } : undefined,
      });
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(res.json().errors[0].field, "params.route_id");
    }
    for (const n of [101, 256, 257, 4000]) {
      const res = await call({ method: "GET", url: `/v1/operator/update/${"u".repeat(n)}` });
      assert.ok([400, 404].includes(res.statusCode), `${n}: ${res.statusCode}`);
      assert.match(String(res.headers["content-type"]), /^application\/problem\+json/);
    }
  });
});

describe("what is validated is what is written", () => {
  test("a dial with whitespace is 400 and Caddy is not touched", async (t) => {
    const { call, caddy } = await setup(t);
    const before = (await caddy.admin.raw("GET", "/config/")).text;
    for (const dial of [" 127.0.0.1:80", "127.0.0.1 :80", "\tlocalhost:80", "127.0.0.1:80\n"]) {
      const res = await call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: { domain: "ws.test", upstreams: [{ dial }] },
      });
      assert.equal(res.statusCode, 400, `${JSON.stringify(dial)}: ${res.body}`);
      assert.deepEqual(res.json().errors, [
        { field: "body.upstreams[0].dial", message: "must not contain whitespace" },
      ]);
    }
    assert.equal((await caddy.admin.raw("GET", "/config/")).text, before);
  });

  test("a create or replace with a bad callback and a bad route names both in one 400, and Caddy is not touched", async (t) => {
    const { call, caddy } = await setup(t);
    const before = (await caddy.admin.raw("GET", "/config/")).text;
    const payload = {
      domain: "two.test",
      upstreams: [{ dial: "127.0.0.1 :80" }],
      callback_url: "ftp://127.0.0.1/hook",
    };
    for (const [method, url] of [
      ["POST", "/v1/proxy/routes"],
      ["PUT", "/v1/proxy/routes/two.test"],
    ] as const) {
      const res = await call({ method, url, payload });
      assert.equal(res.statusCode, 400, res.body);
      assert.deepEqual(
        res.json().errors.map((e: { field: string }) => e.field),
        ["body.upstreams[0].dial", "body.callback_url"],
      );
    }
    assert.equal((await caddy.admin.raw("GET", "/config/")).text, before);
  });

  test("an upstream name is written in its validated form and carries traffic", async (t) => {
    const { call, caddy } = await setup(t);
    const up = await startUpstream(t, "named");
    const res = await call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: { domain: "named.test", upstreams: [{ dial: `LocalHost.:${up.port}` }] },
    });
    assert.equal(res.statusCode, 201, res.body);
    assert.equal(res.json().handle[0].upstreams[0].dial, `localhost:${up.port}`);
    assert.equal((await viaProxy(caddy.httpPort, "named.test")).body, "named");
  });

  test("a domain ending in an ideographic full stop is created under the id the rule gives", async (t) => {
    const { call, caddy } = await setup(t);
    const up = await startUpstream(t, "ideo");
    const cases: [string, string][] = [
      ["ideo-trailing.test\u3002", "ideo-trailing.test"],
      ["ideo\uFF0Efull.test\uFF0E", "ideo.full.test"],
      ["ideo\uFF61half.test\uFF61", "ideo.half.test"],
    ];
    for (const [domain, id] of cases) {
      const res = await call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: { domain, upstreams: [{ dial: `127.0.0.1:${up.port}` }] },
      });
      assert.equal(res.statusCode, 201, `${domain}: ${res.body}`);
      assert.equal(res.json()["@id"], id);
      assert.equal((await viaProxy(caddy.httpPort, id)).body, "ideo");
    }
  });
});

describe("problems say what failed in words", () => {
  test("an unreachable Caddy is named in words, not by its address", async (t) => {
    const { call, caddy } = await setup(t);
    await caddy.stop();
    for (const req of [
      { method: "GET", url: "/v1/proxy/routes" },
      {
        method: "POST",
        url: "/v1/proxy/routes",
        payload: { domain: "down.test", upstreams: [{ dial: "127.0.0.1:9" }] },
      },
    ]) {
      const res = await call(req);
      assert.equal(res.statusCode, 503, res.body);
      const { detail } = res.json();
      assert.match(detail, /Caddy's admin API is unreachable/);
      assert.equal(detail.includes(new URL(caddy.adminUrl).host), false, detail);
    }
  });

  test("paths and sockets are taken out of outside texts", () => {
    assert.equal(
      withoutPaths("loading new config: open /var/lib/hostkeeper/tls/key.pem: no such file or directory"),
      "loading new config: open [path]: no such file or directory",
    );
    assert.equal(
      withoutPaths("dial unix:/var/lib/hostkeeper/caddy/admin.sock: refused"),
      "dial [socket]: refused",
    );
    assert.equal(
      withoutPaths("POST http://127.0.0.1:9/hook answered 500"),
      "POST http://127.0.0.1:9/hook answered 500",
    );
  });

  test("enums and bounds read as sentences, one per field", async (t) => {
    const { call } = await setup(t);
    const res = await call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: {
        domain: "m.test",
        strategy: "random",
        callback_url: 5,
        upstreams: [{ dial: "127.0.0.1:9", weight: -1 }],
      },
    });
    assert.equal(res.statusCode, 400);
    assert.deepEqual(
      res.json().errors.sort((a: { field: string }, b: { field: string }) => a.field.localeCompare(b.field)),
      [
        { field: "body.callback_url", message: "must be a string or null" },
        { field: "body.strategy", message: "must be one of: first, weighted_round_robin" },
        { field: "body.upstreams[0].weight", message: "must be at least 0" },
      ],
    );
    const empty = await call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: { domain: "m.test", upstreams: [] },
    });
    assert.deepEqual(empty.json().errors, [
      { field: "body.upstreams", message: "must have at least 1 item" },
    ]);
    const long = await call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: { domain: "x".repeat(600), upstreams: [{ dial: "127.0.0.1:9" }] },
    });
    assert.deepEqual(long.json().errors, [
      { field: "body.domain", message: "must be at most 512 characters long" },
    ]);
  });
});
