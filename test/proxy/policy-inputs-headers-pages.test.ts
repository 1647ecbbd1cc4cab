import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import {
  assertAccepted,
  assertRefused,
  type Expected,
  type Refusal,
  refuse,
  SITE,
  sharedAgent,
} from "./refusals.js";

/*
 * Every rule of `headers`, `maintenance` and `encode` refused with a 400 naming the field, sent as a create
 * and as a replace of a route with policies, against a real Caddy, with nothing changed; a request with
 * several bad fields names them all, a bad callback_url included.
 */

const agent = sharedAgent(after);
const many = <T>(n: number, f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));
const names = (n: number, prefix: string) => many(n, (i) => `${prefix}-${i}`);

const run = (cases: readonly Refusal[]) => {
  for (const c of cases)
    test(c.name, async () => {
      await refuse(await agent(), c);
    });
};

const NOT_NAME = /must be a header name \(an RFC 9110 token, without \*\)/;
const FRAMING = /is a connection or framing header, which cannot be changed/;
const CTL = /must not contain CR, LF or NUL/;
const BYTES = /must be at most 4096 bytes/;

describe("header names", () => {
  const setName = (name: string, message: RegExp): Refusal => ({
    name: `set ${JSON.stringify(name)}`,
    body: () => ({ headers: { response: { set: { "X-Ok": "1", [name]: "v" } } } }),
    errors: [[`body.headers.response.set.${name}`, message]],
  });
  const deleteName = (name: string, message: RegExp): Refusal => ({
    name: `delete ${JSON.stringify(name)}`,
    body: () => ({ headers: { request: { delete: ["X-Ok", name] } } }),
    errors: [["body.headers.request.delete[1]", message]],
  });
  const BAD = ["X A", "X:A", "X(A)", "X/A", 'X"A', "X@A", "X-Ä", "X\tA", "X\nA", "{env.HOME}", "X,A"];
  const REFUSED = [
    "Connection",
    "CONTENT-LENGTH",
    "transfer-encoding",
    "UpGrade",
    "Keep-Alive",
    "te",
    "TRAILER",
  ];
  run([
    ...BAD.map((n) => setName(n, NOT_NAME)),
    ...BAD.map((n) => deleteName(n, NOT_NAME)),
    setName("", NOT_NAME),
    deleteName("", /at least 1 character/),
    setName("X-*", NOT_NAME),
    setName("*", NOT_NAME),
    deleteName("*", NOT_NAME),
    deleteName("X-Forwarded-*", NOT_NAME),
    ...REFUSED.map((n) => setName(n, FRAMING)),
    ...REFUSED.map((n) => deleteName(n, FRAMING)),
  ]);
});

describe("header values and counts", () => {
  const value = (v: unknown, message: RegExp, side = "request"): Refusal => ({
    name: `${side} value ${JSON.stringify(typeof v === "string" && v.length > 20 ? `${v.slice(0, 10)}... (${Buffer.byteLength(v)} bytes)` : v)}`,
    body: () => ({ headers: { [side]: { set: { "X-Ok": "1", "X-A": v } } } }),
    errors: [[`body.headers.${side}.set.X-A`, message]],
  });
  const entries = (
    request: Record<string, unknown>,
    response: Record<string, unknown>,
    n: number,
  ): Refusal => ({
    name: `${n} entries in all`,
    body: () => ({ headers: { request, response } }),
    errors: [["body.headers", new RegExp(`has ${n} entries; at most 64 in all`)]],
  });
  const set = (keys: string[]) => Object.fromEntries(keys.map((k) => [k, "v"]));
  run([
    ...["a\rb", "a\nb", "a\0b", "\r\n", "ok\r\nX-Evil: 1"].flatMap((v) => [
      value(v, CTL),
      value(v, CTL, "response"),
    ]),
    value("a".repeat(4097), /at most 4096 characters/),
    value("€".repeat(1366), BYTES),
    value("é".repeat(2049), BYTES, "response"),
    value("😀".repeat(1025), BYTES),
    ...["a\u0001b", "a\u007fb", "\u001b[31mred", "a\u000bb"].flatMap((v) => [
      value(v, /must not contain control characters other than tab/),
      value(v, /must not contain control characters other than tab/, "response"),
    ]),
    value(5, /must be a string/),
    value(null, /must be a string/),
    entries({ set: set(names(33, "X-Q")) }, { delete: names(32, "X-R") }, 65),
    entries({ delete: names(40, "X-Q") }, { set: set(names(25, "X-R")) }, 65),
    entries({ set: set(names(65, "X-Q")) }, {}, 65),
    entries({ set: set(names(32, "X-Q")), delete: names(32, "X-D") }, { set: set(["X-Z"]) }, 65),
    {
      name: "more than 64 names to delete on one side",
      body: () => ({ headers: { response: { delete: names(65, "X-D") } } }),
      errors: [["body.headers.response.delete", /at most 64 items/]],
    },
    {
      name: "a name set and deleted",
      body: () => ({ headers: { request: { set: { "X-A": "1" }, delete: ["X-B", "x-a"] } } }),
      errors: [
        ["body.headers.request.delete[1]", /is set and deleted at once \(headers\.request\.set\.X-A\)/],
      ],
    },
    {
      name: "a name twice in delete",
      body: () => ({ headers: { response: { delete: ["X-A", "Server", "x-a"] } } }),
      errors: [["body.headers.response.delete[2]", /is listed twice/]],
    },
    {
      name: "names in set that differ only in case",
      body: () => ({ headers: { response: { set: { "X-A": "1", "x-b": "2", "x-a": "3" } } } }),
      errors: [["body.headers.response.set.x-a", /names the same header as X-A/]],
    },
    {
      name: "unknown fields",
      body: () => ({ headers: { requests: {}, response: { add: { "X-A": "1" } } } }),
      errors: [
        ["body.headers.requests", /is not a known field/],
        ["body.headers.response.add", /is not a known field/],
      ],
    },
  ]);
});

describe("maintenance", () => {
  const page = (m: Record<string, unknown>, field: string, ...messages: RegExp[]): Refusal => ({
    name: `${field} ${JSON.stringify(m).slice(0, 60)}`,
    body: () => ({ maintenance: m }),
    errors: messages.map((msg) => [`body.maintenance.${field}`, msg]),
  });
  const TYPE = /must be a media type such as text\/html; charset=utf-8/;
  run([
    ...[399, 600, 200, 302].map((s) => page({ status: s }, "status", /must be at (least 400|most 599)/)),
    page({ status: 503.5 }, "status", /must be an integer/),
    page({ status: "503" }, "status", /must be an integer/),
    page({ retry_after: -1 }, "retry_after", /must be at least 0/),
    page({ retry_after: 86_401 }, "retry_after", /must be at most 86400/),
    page({ retry_after: 1.5 }, "retry_after", /must be an integer/),
    page({ body: "a".repeat(65_537) }, "body", /at most 65536 characters/),
    page({ body: "é".repeat(32_769) }, "body", /must be at most 64 KiB in UTF-8/),
    page({ body: "€".repeat(21_846) }, "body", /must be at most 64 KiB in UTF-8/),
    ...[
      "text",
      "text/",
      "/html",
      "text/html;",
      "text/html; charset",
      "text/html; charset=",
      "text/html ",
      " text/html",
      "text/html\r\n",
      "text/html\r\nX-Evil: 1",
      "text/html; charset=utf-8\n",
      "text/html;\ncharset=utf-8",
      "text/html;\r\n charset=utf-8",
      "text/html;\u2028charset=utf-8",
      "text/html;\vcharset=utf-8",
      'text/html; a="b\\"c"',
      'text/html; a="b\nc"',
      "tëxt/html",
      "text/html, text/plain",
      "text/{env.HOME}",
      "text/html; a=b c",
    ].map((t) => page({ content_type: t }, "content_type", TYPE)),
    page({ content_type: `text/${"x".repeat(124)}` }, "content_type", /at most 128 characters/),
    page({ content_type: "ab" }, "content_type", /at least 3 characters/),
    page({ message: "down" }, "message", /is not a known field/),
  ]);
});

describe("encode", () => {
  const enc = (e: unknown, field: string, message: RegExp): Refusal => ({
    name: JSON.stringify(e),
    body: () => ({ encode: e }),
    errors: [[field, message]],
  });
  run([
    enc(["br"], "body.encode[0]", /must be one of: zstd, gzip/),
    enc(["gzip", "deflate"], "body.encode[1]", /must be one of: zstd, gzip/),
    enc(["GZIP"], "body.encode[0]", /must be one of: zstd, gzip/),
    enc(["gzip", "gzip"], "body.encode", /duplicate/),
    enc([], "body.encode", /at least 1 item/),
    enc("gzip", "body.encode", /must be an array/),
  ]);
});

describe("a request with several bad fields", () => {
  test("names every field a domain rule refuses, in the request's order", async () => {
    const errors: Expected[] = [
      ["body.upstreams[0].dial", /host:port/],
      ["body.redirect_from[0]", /own domain/],
      ["body.paths[0].prefix", /end with/],
      ["body.paths[1].upstreams[0].dial", /port/],
      ["body.basic_auth.users[0].password_hash", /plain passwords/],
      ["body.allow_ips[0]", /IPv4 or IPv6/],
      ["body.headers.request.set.X A", NOT_NAME],
      ["body.headers.response.set.Connection", FRAMING],
      ["body.maintenance.content_type", /media type/],
    ];
    await assertRefused(
      await agent(),
      (d) => ({
        upstreams: [{ dial: "nope" }],
        redirect_from: [d],
        paths: [
          { prefix: "/a/", upstreams: [{ dial: "127.0.0.1:9" }] },
          { prefix: "/b", upstreams: [{ dial: "127.0.0.1:0" }] },
        ],
        basic_auth: { users: [{ username: "ana", password_hash: "hunter22" }] },
        allow_ips: ["nope"],
        headers: { request: { set: { "X A": "1" } }, response: { set: { Connection: "close" } } },
        maintenance: { content_type: "nope" },
      }),
      errors,
    );
  });

  test("names every field the schema refuses (those come before the domain rules are asked)", async () => {
    const fields = [
      "body.redirect_status",
      "body.paths[0].prefix",
      "body.paths[0].upstreams",
      "body.basic_auth.realm",
      "body.basic_auth.users",
      "body.allow_ips",
      "body.maintenance.status",
      "body.encode[0]",
    ];
    await assertRefused(
      await agent(),
      () => ({
        redirect_from: ["also-a-bad-host:80"],
        redirect_status: 303,
        paths: [{ prefix: "/", upstreams: [] }],
        basic_auth: { realm: 'a"b', users: [] },
        allow_ips: [],
        maintenance: { status: 600 },
        encode: ["br"],
      }),
      fields.map((f) => [f, /./]),
    );
  });

  test("a bad callback_url is named with the route's own errors, for a create and a replace", async () => {
    await assertRefused(
      await agent(),
      () => ({
        callback_url: "ftp://127.0.0.1/hook",
        paths: [{ prefix: "/a*", upstreams: [{ dial: "127.0.0.1:9" }] }],
        headers: { response: { delete: ["Upgrade"] } },
      }),
      [
        ["body.paths[0].prefix", /\*/],
        ["body.headers.response.delete[0]", FRAMING],
        ["body.callback_url", /./],
      ],
    );
  });

  test("a host another route holds is a 400 when a field is bad, and only then a 409", async () => {
    const a = await agent();
    const taken = `www.${SITE}`;
    for (const [extra, field] of [
      [{ allow_ips: ["10.0.0.0/33"] }, "body.allow_ips[0]"],
      [{ encode: ["gzip", "gzip"] }, "body.encode"],
    ] as const)
      await assertRefused(a, () => ({ redirect_from: [taken], ...extra }), [[field, /./]]);
    const before = (await a.caddy.admin.raw("GET", "/config/")).text;
    const res = await a.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: { domain: "other.test", upstreams: [{ dial: "127.0.0.1:9" }], redirect_from: [taken] },
    });
    assert.equal(res.statusCode, 409, res.body);
    assert.equal(res.json().code, "host_conflict");
    assert.equal((await a.caddy.admin.raw("GET", "/config/")).text, before);
  });
});

test("at the limits, headers, the maintenance page and encode are accepted and read back as sent", async () => {
  const value = `\t${"€".repeat(1365)}`;
  assert.equal(Buffer.byteLength(value), 4096);
  const body = `${"€".repeat(21_845)}{`;
  assert.equal(Buffer.byteLength(body), 65_536);
  const params = 'text/plain;\tcharset=utf-8 ;q="{';
  const contentType = `${params}${"x".repeat(128 - params.length - 1)}"`;
  assert.equal(contentType.length, 128);
  const request = {
    headers: {
      request: {
        set: { ...Object.fromEntries(names(31, "X-Q").map((n) => [n, "{env.HOME}"])), "X-V": value },
      },
      response: { delete: names(32, "X-R") },
    },
    maintenance: { status: 599, retry_after: 86_400, body, content_type: contentType },
    encode: ["gzip", "zstd"],
  };
  const read = await assertAccepted(await agent(), request);
  assert.deepEqual(read.headers, request.headers);
  assert.deepEqual(read.maintenance, request.maintenance);
  assert.deepEqual(read.encode, request.encode);
});
