import assert from "node:assert/strict";
import { test } from "node:test";
import { gunzipSync, zstdDecompressSync } from "node:zlib";
import { basic, bcryptHash, recordingUpstream, send } from "./policy-support.js";
import { setup } from "./support.js";

/*
 * Each site policy with traffic through a real Caddy: what a client gets and what an upstream receives.
 */

const dial = (port: number) => [{ dial: `127.0.0.1:${port}` }];

test("redirect_from hosts redirect to the domain with path and query, at the status asked; the domain itself is proxied", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await recordingUpstream(t, "site");
  let res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: {
      domain: "Bücher.test",
      upstreams: dial(up.port),
      redirect_from: ["WWW.Bücher.test.", "old.test"],
      redirect_status: 301,
      basic_auth: { users: [{ username: "u", password_hash: bcryptHash("p") }] },
    },
  });
  assert.equal(res.statusCode, 201, res.body);
  assert.deepEqual(res.json().match, [
    { host: ["xn--bcher-kva.test", "www.xn--bcher-kva.test", "old.test"] },
  ]);
  for (const host of ["www.xn--bcher-kva.test", "OLD.test"]) {
    const r = await send(caddy.httpPort, host, { path: "/a/b%20c?x=1&y={env.HOME}" });
    // Redirect hosts answer without asking for credentials.
    assert.equal(r.status, 301);
    assert.equal(r.headers.location, "http://xn--bcher-kva.test/a/b%20c?x=1&y={env.HOME}");
  }
  assert.equal(up.seen.length, 0);
  const own = await send(caddy.httpPort, "xn--bcher-kva.test", { headers: basic("u", "p") });
  assert.equal(own.status, 200);
  assert.equal(own.body.toString(), "site");

  res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: { domain: "apex.test", upstreams: dial(up.port), redirect_from: ["www.apex.test"] },
  });
  assert.equal(res.statusCode, 201, res.body);
  const r = await send(caddy.httpPort, "www.apex.test", { path: "/p" });
  assert.equal(r.status, 308);
  assert.equal(r.headers.location, "http://apex.test/p");
});

test("paths: the longest prefix that takes the path wins, at segment boundaries, case-insensitively; strip_prefix sends the rest", async (t) => {
  const { caddy, call } = await setup(t);
  const main = await recordingUpstream(t, "main");
  const api = await recordingUpstream(t, "api");
  const v2 = await recordingUpstream(t, "v2");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: {
      domain: "paths.test",
      upstreams: dial(main.port),
      paths: [
        { prefix: "/api", upstreams: dial(api.port), strip_prefix: true },
        { prefix: "/api/v2", upstreams: dial(v2.port) },
      ],
    },
  });
  assert.equal(res.statusCode, 201, res.body);
  const cases: [string, string, string][] = [
    ["/api", "api", "/"],
    ["/api/x?q=1", "api", "/x?q=1"],
    ["/API/Y", "api", "/Y"],
    ["/api/", "api", "/"],
    ["/apix", "main", "/apix"],
    ["/api/v2", "v2", "/api/v2"],
    ["/api/v2/deep/er", "v2", "/api/v2/deep/er"],
    ["/api/v20", "api", "/v20"],
    ["/", "main", "/"],
    ["/other/api", "main", "/other/api"],
  ];
  for (const [path, who, arrived] of cases) {
    const r = await send(caddy.httpPort, "paths.test", { path });
    assert.equal(r.body.toString(), who, path);
    const ups = { main, api, v2 }[who];
    assert.equal(ups?.seen.at(-1)?.path, arrived, path);
  }
});

test("basic_auth: right credentials pass for each bcrypt variant; wrong and missing ones get 401 with the realm, and reach no upstream", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await recordingUpstream(t, "private");
  const hash = bcryptHash("s3cret");
  assert.match(hash, /^\$2a\$04\$/);
  const users = [
    { username: "ana", password_hash: hash },
    { username: "ben", password_hash: hash.replace(/^\$2a\$/, "$2b$") },
    { username: "cy", password_hash: hash.replace(/^\$2a\$/, "$2y$") },
    // Caddy expands placeholders in usernames: the agent writes them literally.
    { username: "{env.HOME}", password_hash: bcryptHash("h") },
  ];
  let res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: { domain: "auth.test", upstreams: dial(up.port), basic_auth: { users } },
  });
  assert.equal(res.statusCode, 201, res.body);
  for (const u of ["ana", "ben", "cy"]) {
    const r = await send(caddy.httpPort, "auth.test", { headers: basic(u, "s3cret") });
    assert.equal(r.status, 200, u);
  }
  assert.equal((await send(caddy.httpPort, "auth.test", { headers: basic("{env.HOME}", "h") })).status, 200);
  assert.equal((await send(caddy.httpPort, "auth.test", { headers: basic(caddy.dir, "h") })).status, 401);
  const hits = up.seen.length;
  for (const headers of [basic("ana", "wrong"), basic("nobody", "s3cret"), {}]) {
    const r = await send(caddy.httpPort, "auth.test", { headers, path: "/deep/path" });
    assert.equal(r.status, 401);
    assert.equal(r.headers["www-authenticate"], 'Basic realm="auth.test"');
  }
  assert.equal(up.seen.length, hits);

  res = await call({
    method: "PUT",
    url: "/v1/proxy/routes/auth.test",
    payload: {
      domain: "auth.test",
      upstreams: dial(up.port),
      basic_auth: { realm: "Staff {env.HOME} area", users },
    },
  });
  assert.equal(res.statusCode, 200, res.body);
  const r = await send(caddy.httpPort, "auth.test");
  assert.equal(r.headers["www-authenticate"], 'Basic realm="Staff {env.HOME} area"');
});

test("allow_ips: a client from a listed address or range is proxied; any other gets 403 and reaches no upstream", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await recordingUpstream(t, "inner");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: {
      domain: "allow.test",
      upstreams: dial(up.port),
      allow_ips: ["2001:db8::/32", "127.0.0.1", "127.0.1.0/24"],
    },
  });
  assert.equal(res.statusCode, 201, res.body);
  assert.equal((await send(caddy.httpPort, "allow.test")).status, 200);
  assert.equal((await send(caddy.httpPort, "allow.test", { from: "127.0.1.9" })).status, 200);
  const before = up.seen.length;
  const denied = await send(caddy.httpPort, "allow.test", { from: "127.0.0.2" });
  assert.equal(denied.status, 403);
  assert.equal(up.seen.length, before);
});

test("headers: request changes reach the upstream and response changes the client, every value exactly as sent", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await recordingUpstream(t, "h");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: {
      domain: "headers.test",
      upstreams: dial(up.port),
      headers: {
        request: {
          set: { "X-Env": "{env.HOME}", "X-File": "{file./etc/hostname}", Host: "inner.test" },
          delete: ["X-Drop"],
        },
        response: {
          set: { "X-Frame-Options": "DENY", "X-Remote": "{http.request.remote} \\{x\\}" },
          delete: ["Server", "x-powered-by"],
        },
      },
    },
  });
  assert.equal(res.statusCode, 201, res.body);
  const r = await send(caddy.httpPort, "headers.test", { headers: { "x-drop": "1", "x-keep": "2" } });
  assert.equal(r.status, 200);
  const seen = up.seen.at(-1)?.headers ?? {};
  assert.equal(seen["x-env"], "{env.HOME}");
  assert.equal(seen["x-file"], "{file./etc/hostname}");
  assert.equal(seen.host, "inner.test");
  assert.equal(seen["x-drop"], undefined);
  assert.equal(seen["x-keep"], "2");
  assert.equal(r.headers["x-frame-options"], "DENY");
  assert.equal(r.headers["x-remote"], "{http.request.remote} \\{x\\}");
  assert.equal(r.headers.server, undefined);
  assert.equal(r.headers["x-powered-by"], undefined);
});

test("maintenance: Caddy answers with the page while it is set, with the response headers and compression; a PUT without it puts traffic back", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await recordingUpstream(t, "live");
  const api = await recordingUpstream(t, "api");
  const site = {
    domain: "maint.test",
    upstreams: dial(up.port),
    paths: [{ prefix: "/api", upstreams: dial(api.port) }],
    headers: { response: { set: { "X-Site": "maint" } } },
    encode: ["gzip"],
  };
  const body = `<h1>Back soon {env.HOME} {file./etc/hostname} \\{ }</h1>${" ".repeat(600)}`;
  let res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: {
      ...site,
      maintenance: { status: 502, retry_after: 120, body, content_type: 'text/plain; x="{env.HOME}"' },
    },
  });
  assert.equal(res.statusCode, 201, res.body);
  for (const path of ["/", "/api/x"]) {
    const r = await send(caddy.httpPort, "maint.test", { path });
    assert.equal(r.status, 502);
    assert.equal(r.headers["retry-after"], "120");
    assert.equal(r.headers["content-type"], 'text/plain; x="{env.HOME}"');
    assert.equal(r.headers["x-site"], "maint");
    assert.equal(r.body.toString(), body);
  }
  const zipped = await send(caddy.httpPort, "maint.test", { headers: { "accept-encoding": "gzip" } });
  assert.equal(zipped.headers["content-encoding"], "gzip");
  assert.equal(gunzipSync(zipped.body).toString(), body);
  assert.equal(up.seen.length + api.seen.length, 0);

  res = await call({
    method: "PUT",
    url: "/v1/proxy/routes/maint.test",
    payload: { ...site, maintenance: {} },
  });
  assert.equal(res.statusCode, 200, res.body);
  const defaults = await send(caddy.httpPort, "maint.test");
  assert.equal(defaults.status, 503);
  assert.equal(defaults.headers["content-type"], "text/html; charset=utf-8");
  assert.equal(defaults.headers["retry-after"], undefined);
  assert.equal(defaults.body.length, 0);

  res = await call({ method: "PUT", url: "/v1/proxy/routes/maint.test", payload: site });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal((await send(caddy.httpPort, "maint.test")).body.toString(), "live");
  assert.equal((await send(caddy.httpPort, "maint.test", { path: "/api/x" })).body.toString(), "api");
});

test("encode: answers are compressed with the encoding the client accepts, in the route's order of preference", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await recordingUpstream(t, "zip");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: { domain: "encode.test", upstreams: dial(up.port), encode: ["zstd", "gzip"] },
  });
  assert.equal(res.statusCode, 201, res.body);
  const text = "zip ".repeat(1024);
  const both = await send(caddy.httpPort, "encode.test", {
    path: "/big",
    headers: { "accept-encoding": "gzip, zstd" },
  });
  assert.equal(both.headers["content-encoding"], "zstd");
  assert.equal(zstdDecompressSync(both.body).toString(), text);
  const gz = await send(caddy.httpPort, "encode.test", {
    path: "/big",
    headers: { "accept-encoding": "gzip" },
  });
  assert.equal(gz.headers["content-encoding"], "gzip");
  assert.equal(gunzipSync(gz.body).toString(), text);
  const plain = await send(caddy.httpPort, "encode.test", { path: "/big" });
  assert.equal(plain.headers["content-encoding"], undefined);
  assert.equal(plain.body.toString(), text);
});

test("order inside a route: allow_ips before basic_auth before the maintenance page; Caddy's own 403 and 401 carry no header changes", async (t) => {
  const { caddy, call } = await setup(t);
  const up = await recordingUpstream(t, "x");
  const res = await call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: {
      domain: "order.test",
      upstreams: dial(up.port),
      allow_ips: ["127.0.0.1"],
      basic_auth: { realm: "R", users: [{ username: "u", password_hash: bcryptHash("p") }] },
      maintenance: { body: "later" },
      headers: { response: { set: { "X-Site": "order" } } },
    },
  });
  assert.equal(res.statusCode, 201, res.body);
  const outside = await send(caddy.httpPort, "order.test", { from: "127.0.0.2", headers: basic("u", "p") });
  assert.equal(outside.status, 403);
  assert.equal(outside.headers["x-site"], undefined);
  const anonymous = await send(caddy.httpPort, "order.test");
  assert.equal(anonymous.status, 401);
  assert.equal(anonymous.headers["www-authenticate"], 'Basic realm="R"');
  assert.equal(anonymous.headers["x-site"], undefined);
  const signedIn = await send(caddy.httpPort, "order.test", { headers: basic("u", "p") });
  assert.equal(signedIn.status, 503);
  assert.equal(signedIn.body.toString(), "later");
  assert.equal(signedIn.headers["x-site"], "order");
  assert.equal(up.seen.length, 0);
});
