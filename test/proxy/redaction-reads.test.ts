import assert from "node:assert/strict";
import { test } from "node:test";
import type { Grant } from "../../src/access/scopes.js";
import { buildTestApp, TEST_TOKEN, type TestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { startReceiver } from "../helpers/http.js";
import { concretePath, secretOf, writeTokensFile } from "../http/support.js";
import { bcryptHash } from "./policy-support.js";

// A token that can only read routes never gets a basic-auth hash back, from any read of the routes or the
// events; a token that can write routes does, and a restore puts the real hash back.

const ROUTES = "/config/apps/http/servers/srv0/routes";
const BCRYPT = /\$2[aby]\$/;
const ID = "auth.redact.test";

const TOKENS: { name: string; scopes: Grant[] }[] = [
  // Every read scope: the events list needs the four.
  { name: "reader", scopes: ["proxy:read", "operator:read", "system:read", "agent:read"] },
  { name: "proxy-reader", scopes: ["proxy:read"] },
  { name: "writer", scopes: ["proxy:read", "proxy:write", "operator:read", "system:read", "agent:read"] },
];
const bearer = (name: string) => ({
  authorization: `Bearer ${name === "all" ? TEST_TOKEN : secretOf(name)}`,
});

/** A route written in Caddy by hand: its account's hash base64-encoded, as Caddy also takes it. */
const handWritten = (i: number, hash: string) => ({
  "@id": `hand${i}.redact.test`,
  match: [{ host: [`hand${i}.redact.test`] }],
  handle: [
    {
      handler: "authentication",
      providers: {
        http_basic: {
          accounts: [{ username: `u${i}`, password: Buffer.from(hash).toString("base64") }],
          hash: { algorithm: "bcrypt" },
        },
      },
    },
    { handler: "static_response", body: "hi" },
  ],
});

async function setup(t: Parameters<typeof buildTestApp>[0]) {
  const caddy = await startCaddy(t);
  const file = writeTokensFile(
    t,
    TOKENS.map((k) => ({ ...k, secret: secretOf(k.name) })),
  );
  const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl, HOSTKEEPER_TOKENS_FILE: file });
  const receiver = await startReceiver(t);
  return { caddy, ...h, receiver };
}

const request = (users: { username: string; password_hash: string }[], callback: string) => ({
  domain: ID,
  upstreams: [{ dial: "127.0.0.1:9" }],
  basic_auth: { users },
  callback_url: callback,
});

/** Every GET the app registered under /v1/proxy and /v1/events, as a path for the route `ID`. */
const readPaths = (app: TestApp["app"]) =>
  app
    .registeredRoutes()
    .filter((r) => r.method === "GET" && /^\/v1\/(proxy|events)(\/|$)/.test(r.url))
    .map((r) => concretePath(r.url, ID));

async function get(h: TestApp, token: string, url: string) {
  const res = await h.app.inject({ method: "GET", url, headers: bearer(token) });
  return { status: res.statusCode, body: res.body };
}

test("a read-only token finds no hash in any read; a writing token reads them; a restore puts the real one back", async (t) => {
  const h = await setup(t);
  const [first, second] = [bcryptHash("first"), bcryptHash("second")];
  const ann = (hash: string) => [{ username: "ann", password_hash: hash }];
  const c = await h.call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: request(ann(first), h.receiver.url),
  });
  assert.equal(c.statusCode, 201, c.body);
  const r = await h.call({
    method: "PUT",
    url: `/v1/proxy/routes/${ID}`,
    payload: request(ann(second), h.receiver.url),
  });
  assert.equal(r.statusCode, 200, r.body);

  const paths = readPaths(h.app);
  for (const p of [
    "/v1/proxy/routes",
    `/v1/proxy/routes/${ID}`,
    `/v1/proxy/routes/${ID}/request`,
    "/v1/events",
  ])
    assert.ok(paths.includes(p), `${p} is not among ${paths.join(", ")}`);
  const base64 = Buffer.from(first).toString("base64");
  /** Reads every path with the readers: no hash anywhere; those that hold the route show where one was. */
  const readerSeesNone = async (what: string) => {
    const redacted: string[] = [];
    for (const path of paths)
      for (const token of ["reader", "proxy-reader"]) {
        const res = await get(h, token, path);
        assert.doesNotMatch(res.body, BCRYPT, `${what}: GET ${path} with ${token} (${res.status})`);
        assert.ok(!res.body.includes(base64), `${what}: GET ${path} with ${token} has the base64 hash`);
        if (res.body.includes('"<redacted>"')) redacted.push(path);
      }
    for (const p of ["/v1/proxy/routes", `/v1/proxy/routes/${ID}`, `/v1/proxy/routes/${ID}/request`])
      assert.ok(redacted.includes(p), `${what}: ${p} shows no redacted hash`);
    assert.ok(redacted.includes(`/v1/proxy/routes/${ID}/history`), what);
    assert.ok(redacted.includes("/v1/events"), what);
  };
  // The list read whole (Caddy sized it small), then, with routes by hand past 64 KiB, streamed.
  await readerSeesNone("small list");
  await h.caddy.admin.write(
    "POST",
    `${ROUTES}/...`,
    Array.from({ length: 300 }, (_, i) => handWritten(i, first)),
  );
  const list = await get(h, "writer", "/v1/proxy/routes");
  assert.ok(
    list.body.length > 64 * 1024 && list.body.includes(base64),
    "the writer reads the long list whole",
  );
  await readerSeesNone("streamed list");

  // The writer reads the hashes where the reader read <redacted>.
  assert.ok((await get(h, "writer", `/v1/proxy/routes/${ID}`)).body.includes(second));
  assert.equal(
    JSON.parse((await get(h, "writer", `/v1/proxy/routes/${ID}/request`)).body).basic_auth.users[0]
      .password_hash,
    second,
  );
  const history = (await get(h, "all", `/v1/proxy/routes/${ID}/history`)).body;
  assert.ok(history.includes(first) && history.includes(second));
  assert.ok((await get(h, "writer", "/v1/events")).body.includes(second));
  // Callbacks go to whoever wrote the route: with the hash.
  await h.receiver.waitFor(4, 5000);
  assert.ok(h.receiver.received.some((w) => w.body.includes(second)));

  // The replace is undone with the real first hash, not with what the reader saw.
  const replace = JSON.parse(history).changes[0].change_id as number;
  const back = await h.app.inject({
    method: "POST",
    url: `/v1/proxy/routes/${ID}/restore`,
    payload: { change_id: replace },
    headers: bearer("writer"),
  });
  assert.equal(back.statusCode, 200, back.body);
  const inCaddy = (await h.caddy.admin.read(`/id/${ID}`)).text;
  assert.ok(inCaddy.includes(first) && !inCaddy.includes("<redacted>"), inCaddy);
  assert.doesNotMatch((await get(h, "reader", `/v1/proxy/routes/${ID}`)).body, BCRYPT);
});
