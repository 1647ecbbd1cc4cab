import assert from "node:assert/strict";
import { test } from "node:test";
import { caddyEtag, goJson } from "../../src/caddy/routes/etag.js";
import { Utf8Xxh64, Xxh64 } from "../../src/caddy/routes/xxh64.js";
import { startCaddy } from "../helpers/caddy.js";

/** XXH64 of bytes given at once. */
const xxh64Hex = (bytes: Uint8Array): string => new Xxh64().update(bytes).digestHex();

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

test("XXH64 on 32-bit halves gives the reference implementation's hashes, across its block and tail sizes", () => {
  // From XXH64's reference (seed 0): every branch of the tail (8, 4 and 1 bytes) and the 32-byte stripes.
  const text = Buffer.from("Nobody inspects the spammish repetition; ü ☃ 😀 ".repeat(3));
  const expected: Record<number, string> = {
    0: "ef46db3751d8e999",
    1: "16b6310ebd34bd7c",
    3: "c9836c0b0560ccba",
    4: "265faa35d7afec64",
    7: "b0e815555cf3e789",
    8: "93fc083b5a3f012c",
    9: "9ad43e84f12d75b0",
    12: "a45d439f3f93e297",
    31: "c1a0e0ae86e1d78c",
    32: "96f5bfcbfe7f0d1a",
    33: "977f4aa19d128181",
    63: "87c3689e45699cf7",
    64: "ee2220b0df27737a",
    100: "e7b379dd6f5b51c5",
    159: "c3486da05b960f31",
  };
  for (const [n, hash] of Object.entries(expected))
    assert.equal(xxh64Hex(text.subarray(0, Number(n))), hash, `${n} bytes`);
  assert.equal(xxh64Hex(Buffer.from("abc")), "44bc2cf5ad770999");
});

test("XXH64 of bytes or text given in pieces is the hash of them whole", () => {
  const bytes = Buffer.from("Nobody inspects the spammish repetition; ü ☃ 😀 ".repeat(5000));
  const whole = xxh64Hex(bytes);
  // Pieces of every size around a stripe (32 bytes), with empty ones among them.
  for (const size of [0, 1, 7, 31, 32, 33, 100, 65_537]) {
    const hash = new Xxh64();
    for (let i = 0; i < bytes.length; i += Math.max(size, 1)) {
      hash.update(bytes, i, Math.min(i + size, bytes.length));
      if (size === 0) hash.update(bytes, i, i + 1);
    }
    assert.equal(hash.digestHex(), whole, `pieces of ${size} bytes`);
  }
  assert.equal(new Xxh64().digestHex(), xxh64Hex(new Uint8Array(0)));
  // Text: characters of 2, 3 and 4 bytes across the encoding buffer's 64 KiB edges, in one piece or many.
  const text = bytes.toString("utf8");
  assert.equal(new Utf8Xxh64().add(text).digestHex(), whole);
  const pieces = new Utf8Xxh64();
  for (const [i, word] of text.split(" ").entries()) pieces.add(i === 0 ? word : ` ${word}`);
  assert.equal(pieces.digestHex(), whole);
  assert.equal(new Utf8Xxh64().digestHex(), xxh64Hex(new Uint8Array(0)));
});
