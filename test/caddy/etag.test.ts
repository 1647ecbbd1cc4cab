import assert from "node:assert/strict";
import { test } from "node:test";
import { caddyEtag, goJson } from "../../src/caddy/etag.js";
import { startCaddy } from "../helpers/caddy.js";

// The agent computes the ETag Caddy gives the routes it wrote (caddy/etag.ts) instead of reading them back.
// Checked here against a real Caddy with values whose text Go writes its own way: a `vars` handler takes
// any keys and values, and Caddy keeps them as it decoded them.

const ROUTES = "/config/apps/http/servers/srv0/routes";

const odd = {
  "html <b> & </b>": "a<b>&c>d",
  separators: "line\u2028para\u2029end",
  controls: '\b\f\n\r\t\u0000\u0001\u001f\u007f"\\/',
  unicode: "é 漢字 😀 \uffee",
  lone: ["\ud800", "a\udc00b", "\ud83d"],
  "\u00e9": 1,
  "😀": 2,
  "\uffee": 3,
  "10": "integer-like keys come first in JavaScript, in Go by their bytes",
  "2": true,
  numbers: [0, -0, 1, -1, 0.1 + 0.2, 1e21, 1.5e300, 5e-7, 1e-6, 2 ** 53 + 2, 123456789012345680000, -1e-320],
  empty: [{}, [], null, false, ""],
  nested: { z: { b: [1, { d: 1, c: 2 }], a: null }, a: "first" },
};

const route = (id: string, vars: Record<string, unknown>) => ({
  "@id": id,
  match: [{ host: [`${id}.etag.test`] }],
  handle: [
    { handler: "vars", ...vars },
    { handler: "static_response", body: id },
  ],
  terminal: true,
});

test("the ETag computed for routes is Caddy's, for the routes as sent and as read back", async (t) => {
  const caddy = await startCaddy(t);
  const routes = [route("plain", { a: "b" }), route("odd", odd), route("sorted", { b: 1, a: 2, A: 3, _: 4 })];
  await caddy.admin.write("PATCH", ROUTES, routes);
  const read = await caddy.admin.read(ROUTES);
  assert.equal(read.status, 200);
  assert.equal(caddyEtag(ROUTES, routes), read.etag);
  assert.equal(goJson(routes), read.text);
  const back = JSON.parse(read.text) as unknown[];
  assert.equal(caddyEtag(ROUTES, back), read.etag);
  // Once more from the encodings kept for each route, and for a single route's path.
  assert.equal(caddyEtag(ROUTES, routes), read.etag);
  const one = await caddy.admin.read(`${ROUTES}/1`);
  assert.equal(caddyEtag(`${ROUTES}/1`, routes[1]), one.etag);
  // What Caddy takes as If-Match is what it gives.
  await caddy.admin.write("POST", ROUTES, route("next", {}), caddyEtag(ROUTES, routes));
  await assert.rejects(
    caddy.admin.write("POST", ROUTES, route("stale", {}), caddyEtag(ROUTES, routes)),
    /412|did not match/,
  );
});

test("Go's text of a value: sorted keys, HTML escapes and lone surrogates as Go writes them, -0 as sent", () => {
  assert.equal(goJson({ b: 1, a: [-0, "<&>"] }), '{"a":[0,"\\u003c\\u0026\\u003e"],"b":1}\n');
  assert.equal(goJson({ "10": 1, "2": 2 }), '{"10":1,"2":2}\n');
  assert.equal(goJson(["\ud800x"]), '["\ufffdx"]\n');
  assert.equal(goJson({ "😀": 1, "\uffee": 2 }), '{"\uffee":2,"😀":1}\n');
  assert.equal(goJson({ a: undefined, b: [undefined] }), '{"b":[null]}\n');
});
