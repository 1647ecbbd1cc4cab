import assert from "node:assert/strict";
import { describe, type TestContext, test } from "node:test";
import fc from "fast-check";
import { httpRequest } from "../../support/loopback.js";
import { TEST_TOKEN } from "../helpers/app.js";
import { type RawResponse, rawRequest, requestText } from "../helpers/raw-http.js";
import { OPERATOR_DOMAIN, startGuardedAgent } from "./support.js";

/**
 * A black-box fuzz of every operation in the served OpenAPI document. Every request here must be refused:
 * bad tokens, bad paths, bad bodies, bad framing. Each answer is checked for what a client may see (no
 * 5xx, a problem body whose status is the answer's, no stack frame, no file path), and after each group
 * Caddy's config must be byte for byte what it was before.
 */

type Schema = {
  $ref?: string;
  type?: string | string[];
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  enum?: unknown[];
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  minItems?: number;
  maxItems?: number;
  additionalProperties?: boolean;
};
type Operation = {
  operationId: string;
  parameters?: { in: string; name: string; schema: Schema }[];
  requestBody?: { content: Record<string, { schema: Schema }> };
};
type Doc = {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Schema> };
};

interface Op {
  method: string;
  template: string;
  op: Operation;
}

const EXISTING = "fuzz-existing.test";
const ABSENT = "absent.example.test";
const auth = { authorization: `Bearer ${TEST_TOKEN}` };

/**
 * A valid body per operation that takes one; each fuzzed body is one of these with exactly one thing broken.
 * Listed by operationId: a new operation with a body fails the test until it has one.
 */
const BASELINES: Record<string, Record<string, unknown>> = {
  createRoute: { domain: "fuzz-new.test", upstreams: [{ dial: "127.0.0.1:9" }] },
  replaceRoute: { domain: EXISTING, upstreams: [{ dial: "127.0.0.1:9" }] },
  deleteRoute: {},
  // The create of EXISTING, the fuzz agent's first change: restoring it would remove the route.
  restoreRoute: { change_id: 1 },
  // Refused by the API's own check (no certificate in it): with a valid one every name the path fuzz tries
  // would load a certificate into Caddy.
  putCertificate: { certificate_pem: "not a certificate", key_pem: "not a key" },
  applyUpdates: { update_type: "security" },
  downloadUpdates: { update_type: "security" },
  // A one-minute window a week: a mutant that opens one now runs an apply on buildTestApp's empty apt root.
  setSchedule: {
    windows: [{ days: ["sun"], start: "03:00", duration_minutes: 1 }],
    timezone: "UTC",
    update_type: "security",
    reboot: "never",
  },
  // Refused without update keys (409): nothing is fetched.
  startAgentUpdate: { version: "1.0.0" },
  startOperatorUpdate: {
    callback_url: "http://127.0.0.1:9/hook",
    update_process_id: "fuzz-1",
    version: "1.0.0",
  },
};

/** Values the schema allows but the API's own rules refuse, per field name. */
const SEMANTIC_BAD: Record<string, unknown[]> = {
  domain: [
    " ",
    "a..b",
    "-a.test",
    "a/b.test",
    "a.test:80",
    "*",
    "a.*.test",
    `${"x".repeat(64)}.test`,
    "ex ample.test",
    "127.1",
    "a\u0000.test",
    "a.test..",
    "xn--a.test",
  ],
  dial: [
    " 127.0.0.1:80",
    "127.0.0.1 :80",
    "\tlocalhost:80",
    "localhost:80\n",
    "127.0.0.1",
    "127.0.0.1:0",
    "127.0.0.1:65536",
    "[::1]",
    "[zz]:80",
    "http://x:80",
    "x:080",
    "*.x:80",
    "a\u0000b:80",
  ],
  callback_url: [
    "ftp://127.0.0.1/x",
    "javascript:alert(1)",
    "file:///etc/passwd",
    "http://169.254.169.254/latest/meta-data",
    "http://user:pass@127.0.0.1/x",
    "not a url",
    "//127.0.0.1/x",
    "http://[fe80::1]/x",
  ],
  artifact_source: ["ftp://127.0.0.1/x", "file:///etc", "http://user:pw@127.0.0.1/x", "s3://", "no scheme"],
  update_process_id: ["../x", "a/b", "-x", "ä", "x".repeat(129), "a b"],
  version: ["../1", "1/2", "", "-1", "1 0"],
  checksum: ["abc", `sha1:${"a".repeat(40)}`, `sha256:${"z".repeat(64)}`, "a".repeat(63)],
};

function resolve(doc: Doc, s: Schema): Schema {
  let cur = s;
  while (cur.$ref) {
    const name = cur.$ref.replace(/^#\/components\/schemas\//, "");
    const next = doc.components.schemas[name];
    assert.ok(next, `unresolved ${cur.$ref}`);
    cur = next;
  }
  return cur;
}

const types = (s: Schema) => (Array.isArray(s.type) ? s.type : s.type ? [s.type] : []);

/** Values of a type the schema does not allow; by construction each fails validation. */
function wrongTypes(s: Schema): unknown[] {
  const allowed = types(s);
  const candidates: [string, unknown][] = [
    ["string", "text"],
    ["integer", 7],
    ["number", 1.5],
    ["boolean", true],
    ["null", null],
    ["array", []],
    ["object", {}],
  ];
  return candidates
    .filter(([t]) => !allowed.includes(t) && !(t === "integer" && allowed.includes("number")))
    .map(([, v]) => v);
}

/** Values of the right type outside the schema's bounds, enum or pattern. */
function outOfBounds(s: Schema): unknown[] {
  const out: unknown[] = [];
  if (s.enum) out.push("not-one-of-them", String(s.enum[0]).toUpperCase(), ` ${s.enum[0]}`);
  if (s.maxLength !== undefined) out.push("x".repeat(s.maxLength + 1), "ü".repeat(s.maxLength + 1));
  if (s.minLength !== undefined && s.minLength > 0) out.push("x".repeat(s.minLength - 1));
  if (s.pattern) {
    const re = new RegExp(s.pattern, "u");
    out.push(...["", " ", "../etc", "a\nb", "x".repeat(300), "%00"].filter((v) => !re.test(v)));
  }
  if (s.minimum !== undefined) out.push(s.minimum - 1);
  if (s.maximum !== undefined) out.push(s.maximum + 1, Number.MAX_SAFE_INTEGER * 4);
  if (types(s).includes("integer")) out.push(1.5);
  if (s.minItems !== undefined && s.minItems > 0) out.push([]);
  if (s.maxItems !== undefined)
    out.push(Array.from({ length: s.maxItems + 1 }, () => ({ dial: "127.0.0.1:9" })));
  return out;
}

type Mutant = { what: string; body: unknown };

/** Every single-point breakage of `value` (valid for `schema`) the schema and the API's rules refuse. */
function mutants(doc: Doc, schema: Schema, value: unknown, at: string, field = ""): Mutant[] {
  const s = resolve(doc, schema);
  const out: Mutant[] = [];
  const here = (v: unknown, why: string) => out.push({ what: `${at} ${why}`, body: v });
  for (const v of wrongTypes(s)) here(v, `as ${JSON.stringify(v)}`);
  for (const v of outOfBounds(s)) here(v, `out of bounds (${JSON.stringify(v).slice(0, 40)})`);
  for (const v of SEMANTIC_BAD[field] ?? []) here(v, `refused by the API's rule (${JSON.stringify(v)})`);
  if (
    types(s).includes("object") &&
    s.properties &&
    value &&
    typeof value === "object" &&
    !Array.isArray(value)
  ) {
    const obj = value as Record<string, unknown>;
    for (const r of s.required ?? []) {
      const { [r]: _gone, ...rest } = obj;
      here(rest, `without required ${r}`);
    }
    if (s.additionalProperties === false) {
      here({ ...obj, unknown_field: 1 }, "with an unknown field");
      // A computed key makes an own `__proto__` property, so it is sent rather than setting a prototype.
      here({ ...obj, ["__proto__"]: { polluted: true } }, "with __proto__");
      here(JSON.parse(`{"constructor":{"prototype":{"polluted":true}}}`), "with constructor.prototype");
    }
    for (const [name, prop] of Object.entries(s.properties)) {
      const current = obj[name] ?? sample(doc, prop);
      for (const m of mutants(doc, prop, current, `${at}.${name}`, name))
        out.push({ ...m, body: { ...obj, [name]: m.body } });
    }
  }
  if (types(s).includes("array") && s.items && Array.isArray(value) && value.length > 0) {
    for (const m of mutants(doc, s.items, value[0], `${at}[0]`, field))
      out.push({ ...m, body: [m.body, ...value.slice(1)] });
  }
  return out;
}

/** A valid value for an optional property that the baseline leaves out (so its breakages are tried too). */
function sample(doc: Doc, schema: Schema): unknown {
  const s = resolve(doc, schema);
  if (s.enum) return s.enum[0];
  const t = types(s)[0];
  return t === "integer" || t === "number"
    ? 1
    : t === "boolean"
      ? true
      : t === "array"
        ? []
        : t === "object"
          ? {}
          : "x";
}

const STACK_FRAME = /\bat [^\n]*:\d+:\d+|node:internal|\.(?:js|ts|mjs):\d+/;
const ABSOLUTE_PATH = /(?:^|[\s"'(=[,])\/(?:var|tmp|work|usr|etc|home|root|proc|run|opt|srv|lib|dev)\b|unix:/;

/** What any answer to a refused request must be; returns what is wrong with it, or undefined. */
function problemWith(res: RawResponse, method: string): string | undefined {
  if (res.status >= 500) return `answered ${res.status}`;
  if (res.status < 400) return `was not refused (${res.status})`;
  if (method === "HEAD") return undefined;
  if (!/^application\/problem\+json/.test(res.headers["content-type"] ?? ""))
    return `content-type ${res.headers["content-type"]}`;
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(res.body);
  } catch {
    return `body is not JSON: ${res.body.slice(0, 80)}`;
  }
  if (body.status !== res.status) return `body status ${body.status} on a ${res.status}`;
  for (const k of ["type", "title", "detail", "code"])
    if (typeof body[k] !== "string") return `problem member ${k} missing`;
  if (STACK_FRAME.test(res.body)) return `a stack frame in ${res.body}`;
  if (ABSOLUTE_PATH.test(res.body)) return `a path in ${res.body}`;
  if (res.status === 401 && Object.keys(body).sort().join() !== "code,detail,status,title,type")
    return `401 says more than that: ${res.body}`;
  return undefined;
}

async function fuzzAgent(t: TestContext) {
  const agent = await startGuardedAgent(t);
  const created = await httpRequest(agent.port, "POST", "/v1/proxy/routes", {
    headers: auth,
    body: { domain: EXISTING, upstreams: [{ dial: "127.0.0.1:9" }] },
  });
  assert.equal(created.status, 201, created.body);
  const doc = JSON.parse(
    (await httpRequest(agent.port, "GET", "/v1/openapi.json", { headers: auth })).body,
  ) as Doc;
  const ops: Op[] = Object.entries(doc.paths).flatMap(([template, item]) =>
    Object.entries(item).map(([method, op]) => ({ method: method.toUpperCase(), template, op })),
  );
  const caddyConfig = async () => (await agent.caddy.admin.raw("GET", "/config/")).text;
  const before = await caddyConfig();
  const failures: string[] = [];
  let sent = 0;
  const send = async (what: string, method: string, bytes: string | Buffer) => {
    sent++;
    let res: RawResponse;
    try {
      res = await rawRequest(agent.port, bytes);
    } catch (err) {
      failures.push(`${what}: ${(err as Error).message}`);
      return;
    }
    const p = problemWith(res, method);
    if (p) failures.push(`${what}: ${p}`);
  };
  const finish = async () => {
    t.diagnostic(`${sent} refused requests`);
    assert.deepEqual(failures.slice(0, 25), [], `${failures.length} of ${sent} requests answered wrongly`);
    assert.equal(await caddyConfig(), before, "Caddy's config changed");
  };
  return { agent, doc, ops, send, finish };
}

/** A path for the operation: `:param`s of routes get the existing route unless told otherwise. */
const pathOf = (o: Op, id = EXISTING) => o.template.replace(/\{[^}]+\}/g, encodeURIComponent(id));

describe("fuzz of every operation in the OpenAPI document", () => {
  test("bad tokens, on every operation and several spellings of its path", async (t) => {
    const f = await fuzzAgent(t);
    const tokens: [string, Record<string, string>][] = [
      ["no token", {}],
      ["a wrong token", { authorization: "Bearer wrong" }],
      ["lowercase scheme, wrong token", { authorization: "bearer wrong" }],
      ["the token with a suffix", { authorization: `Bearer ${TEST_TOKEN}x` }],
      ["the token as a prefix", { authorization: `Bearer ${TEST_TOKEN.slice(0, 8)}` }],
      ["two tokens", { authorization: `Bearer wrong Bearer ${TEST_TOKEN}` }],
      ["Basic", { authorization: `Basic ${Buffer.from(`u:${TEST_TOKEN}`).toString("base64")}` }],
      ["the token in another header", { "x-api-key": TEST_TOKEN, token: TEST_TOKEN }],
      ["a NUL in the token", { authorization: `Bearer ${TEST_TOKEN}%00` }],
    ];
    for (const o of f.ops) {
      const body = BASELINES[o.op.operationId];
      const plain = pathOf(o);
      const paths = [
        plain,
        `/%76%31${plain.slice(3)}`,
        `//${plain.slice(1)}`,
        `${plain}?access_token=${TEST_TOKEN}`,
      ];
      for (const path of paths)
        for (const [who, headers] of tokens)
          await f.send(
            `${o.method} ${path} with ${who}`,
            o.method,
            requestText(o.method, path, {
              headers: { ...headers, ...(body ? { "content-type": "application/json" } : {}) },
              ...(body ? { body: JSON.stringify(body) } : {}),
            }),
          );
    }
    await f.finish();
  });

  test("bad paths and parameters, with the token", async (t) => {
    const f = await fuzzAgent(t);
    const ids = [
      "",
      "%",
      "%zz",
      "%FF%FE",
      "%2e%2e",
      "..%2F..%2Fetc%2Fpasswd",
      "a%2Fb",
      "%00",
      "x".repeat(257),
      "x".repeat(5000),
      "%C3%A4%C3%B6",
      "*",
      ABSENT,
      ABSENT.toUpperCase(),
      `${EXISTING}.`,
      `${EXISTING}%20`,
      encodeURIComponent("<script>"),
      "a;b",
    ];
    for (const o of f.ops.filter((x) => x.template.includes("{"))) {
      const body = BASELINES[o.op.operationId];
      for (const id of ids) {
        const path = o.template.replace(/\{[^}]+\}/g, id);
        // A valid body for another route (or none): only the path may make this request fail.
        const forId = body && "domain" in body ? { ...body, domain: "fuzz-other.test" } : body;
        await f.send(
          `${o.method} ${path.slice(0, 80)}`,
          o.method,
          requestText(o.method, path, {
            headers: { ...auth, ...(forId ? { "content-type": "application/json" } : {}) },
            ...(forId ? { body: JSON.stringify(forId) } : {}),
          }),
        );
      }
    }
    // Known paths with methods they do not answer.
    for (const o of f.ops)
      for (const m of ["PATCH", "OPTIONS", "TRACE"])
        await f.send(`${m} ${pathOf(o, ABSENT)}`, m, requestText(m, pathOf(o, ABSENT), { headers: auth }));
    // The operator's route is the agent's own: replace and delete are refused.
    for (const o of f.ops.filter((x) => ["replaceRoute", "deleteRoute"].includes(x.op.operationId))) {
      const body =
        o.op.operationId === "replaceRoute"
          ? { domain: OPERATOR_DOMAIN, upstreams: [{ dial: "127.0.0.1:9" }] }
          : {};
      await f.send(
        `${o.method} the operator's route`,
        o.method,
        requestText(o.method, pathOf(o, OPERATOR_DOMAIN), {
          headers: { ...auth, "content-type": "application/json" },
          body: JSON.stringify(body),
        }),
      );
    }
    // Queries on the one operation that takes one.
    for (const q of [
      "limit=0",
      "limit=abc",
      "limit=1001",
      "limit=-1",
      "limit=1&limit=2",
      "other=1",
      "limit=%zz",
    ])
      await f.send(
        `apply-history ?${q}`,
        "GET",
        requestText("GET", `/v1/system/apply-history?${q}`, { headers: auth }),
      );
    await f.finish();
  });

  test("bad bodies: each field broken alone, wrong media types, random JSON", async (t) => {
    const f = await fuzzAgent(t);
    const withBody = f.ops.filter((o) => o.op.requestBody);
    for (const o of withBody)
      assert.ok(BASELINES[o.op.operationId], `no baseline body for ${o.op.operationId}`);
    for (const o of withBody) {
      const baseline = BASELINES[o.op.operationId] as Record<string, unknown>;
      const schema = o.op.requestBody?.content["application/json"]?.schema;
      assert.ok(schema, `${o.op.operationId} takes no JSON body`);
      const path = pathOf(o);
      const post = (what: string, body: string | Buffer, headers: Record<string, string> = {}, at = path) =>
        f.send(
          `${o.op.operationId} ${what}`,
          o.method,
          requestText(o.method, at, {
            headers: { ...auth, "content-type": "application/json", ...headers },
            body: body.toString(),
          }),
        );
      for (const m of mutants(f.doc, schema, baseline, "body")) await post(m.what, JSON.stringify(m.body));
      // Bodies that are not one object.
      for (const raw of [
        "",
        "{",
        "[",
        "null",
        "[]",
        "1",
        '"x"',
        "true",
        "{}}",
        "{'a':1}",
        "\u0000",
        '{"a":1,}',
      ])
        if (raw !== "" || o.op.operationId !== "deleteRoute") await post(`raw ${JSON.stringify(raw)}`, raw);
      await post("nested 10,000 deep", `${"[".repeat(10_000)}${"]".repeat(10_000)}`);
      await post("over the body limit", JSON.stringify({ ...baseline, pad: "x".repeat(1_100_000) }));
      await post(
        "a duplicate key",
        `${JSON.stringify(baseline).slice(0, -1)},"unknown_field":1,"unknown_field":2}`,
      );
      // The right JSON under other media types.
      for (const type of [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "application/json-patch+json",
      ])
        await post(`as ${type}`, JSON.stringify({ ...baseline, unknown_field: 1 }), { "content-type": type });
      // Random JSON values, and random objects over the schema's own field names (fixed seed: reproducible).
      const props = Object.keys(resolve(f.doc, schema).properties ?? {});
      const samples = [
        ...fc.sample(fc.jsonValue({ maxDepth: 3 }), { numRuns: 60, seed: 8 }),
        ...fc.sample(
          fc.dictionary(fc.constantFrom(...props, "unknown_field"), fc.jsonValue({ maxDepth: 2 }), {
            minKeys: 1,
          }),
          {
            numRuns: 60,
            seed: 9,
          },
        ),
      ];
      // A random body may happen to be valid (`{}` deletes): against an absent route it is refused all the same.
      const randomPath = pathOf(o, ABSENT);
      for (const [i, v] of samples.entries())
        await post(`random #${i} ${JSON.stringify(v).slice(0, 60)}`, JSON.stringify(v), {}, randomPath);
    }
    // Refused by the state of Caddy or the API's rules, not by the schema.
    const create = f.ops.find((o) => o.op.operationId === "createRoute");
    assert.ok(create);
    for (const domain of [EXISTING, EXISTING.toUpperCase(), `${EXISTING}.`, OPERATOR_DOMAIN])
      await f.send(
        `create existing ${domain}`,
        "POST",
        requestText("POST", create.template, {
          headers: { ...auth, "content-type": "application/json" },
          body: JSON.stringify({ domain, upstreams: [{ dial: "127.0.0.1:9" }] }),
        }),
      );
    for (const body of [
      { domain: "w.test", upstreams: [{ dial: "127.0.0.1:9", weight: 2 }] },
      { domain: "w.test", strategy: "weighted_round_robin", upstreams: [{ dial: "127.0.0.1:9", weight: 0 }] },
    ])
      await f.send(
        `create ${JSON.stringify(body)}`,
        "POST",
        requestText("POST", create.template, {
          headers: { ...auth, "content-type": "application/json" },
          body: JSON.stringify(body),
        }),
      );
    for (const [what, path, body] of [
      ["restore of a change of another route", `/v1/proxy/routes/${ABSENT}/restore`, { change_id: 1 }],
      ["restore of an unknown change", `/v1/proxy/routes/${EXISTING}/restore`, { change_id: 999_999 }],
      ["restore of the operator's route", `/v1/proxy/routes/${OPERATOR_DOMAIN}/restore`, { change_id: 1 }],
    ] as const)
      await f.send(
        what,
        "POST",
        requestText("POST", path, {
          headers: { ...auth, "content-type": "application/json" },
          body: JSON.stringify(body),
        }),
      );
    await f.send(
      "replace with a domain of another id",
      "PUT",
      requestText("PUT", `/v1/proxy/routes/${EXISTING}`, {
        headers: { ...auth, "content-type": "application/json" },
        body: JSON.stringify({ domain: "other.test", upstreams: [{ dial: "127.0.0.1:9" }] }),
      }),
    );
    await f.finish();
  });

  test("bad framing over a raw socket", async (t) => {
    const f = await fuzzAgent(t);
    const routes = "/v1/proxy/routes";
    const body = JSON.stringify({ domain: "framing.test", upstreams: [{ dial: "127.0.0.1:9" }] });
    const head = (extra: string) =>
      `POST ${routes} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${TEST_TOKEN}\r\nContent-Type: application/json\r\n${extra}`;
    const cases: [string, string | Buffer][] = [
      ["a garbage request line", "GARBAGE\r\n\r\n"],
      ["a request line without a version", `GET ${routes}\r\n\r\n`],
      ["an unknown HTTP version", `GET ${routes} HTTP/9.9\r\nHost: x\r\n\r\n`],
      ["an unknown method token", `G(T ${routes} HTTP/1.1\r\nHost: x\r\n\r\n`],
      [
        "binary bytes",
        Buffer.from([
          0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03, 0x0d, 0x0a, 0x0d, 0x0a,
        ]),
      ],
      ["the HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"],
      ["a non-numeric Content-Length", `${head("Content-Length: abc\r\n")}\r\n${body}`],
      ["a negative Content-Length", `${head("Content-Length: -1\r\n")}\r\n${body}`],
      [
        "two different Content-Lengths",
        `${head(`Content-Length: ${body.length}\r\nContent-Length: 3\r\n`)}\r\n${body}`,
      ],
      [
        "Content-Length with chunked",
        `${head(`Content-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n`)}\r\n${body}`,
      ],
      ["a bad chunk size", `${head("Transfer-Encoding: chunked\r\n")}\r\nzz\r\n${body}\r\n0\r\n\r\n`],
      ["a chunk longer than said", `${head("Transfer-Encoding: chunked\r\n")}\r\n2\r\n${body}\r\n0\r\n\r\n`],
      ["an unknown transfer coding", `${head("Transfer-Encoding: gzip\r\n")}\r\n${body}`],
      [
        "a 20 KB header",
        `${head(`X-Big: ${"a".repeat(20_000)}\r\n`)}Content-Length: ${body.length}\r\n\r\n${body}`,
      ],
      ["a 20 KB request line", `GET ${routes}?${"a".repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`],
      ["a header without a colon", `${head("NoColonHere\r\n")}Content-Length: 2\r\n\r\n{}`],
      ["a NUL in a header", `${head("X-Nul: a\u0000b\r\n")}Content-Length: 2\r\n\r\n{}`],
      ["a bare LF line ending", `GET ${routes} HTTP/1.1\nHost: x\nAuthorization: Bearer ${TEST_TOKEN}\n\n`],
      ["an obsolete folded header", `${head("X-Fold: a\r\n b\r\n")}Content-Length: 2\r\n\r\n{}`],
      ["no Host header", `GET ${routes} HTTP/1.1\r\nAuthorization: Bearer ${TEST_TOKEN}\r\n\r\n`],
      ["an Expect other than 100-continue", `${head("Expect: 200-ok\r\n")}Content-Length: 2\r\n\r\n{}`],
      [
        "an Expect without a token",
        `POST ${routes} HTTP/1.1\r\nHost: x\r\nExpect: x\r\nContent-Length: 2\r\n\r\n{}`,
      ],
      ["a space before the colon", `${head("Content-Length : 2\r\n")}\r\n{}`],
    ];
    for (const [what, bytes] of cases) await f.send(what, "POST", bytes);
    await f.finish();
  });
});
