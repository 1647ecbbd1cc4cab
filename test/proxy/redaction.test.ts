import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { describe, test } from "node:test";
import fc from "fast-check";
import { REDACTED, redactStream, redactText, SecretRedactor } from "../../src/proxy/redaction.js";

// The scanner that takes basic-auth hashes out of answers, checked against a reference that parses.

/** The reference: every string value of a `password` or `password_hash` member replaced, at any depth. */
function reference(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reference);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [
      k,
      (k === "password" || k === "password_hash") && typeof v === "string" ? REDACTED : reference(v),
    ]),
  );
}

/** `text` cut at `cuts` (byte offsets), scanned chunk by chunk. */
function scanned(text: string, cuts: number[]): string {
  const bytes = Buffer.from(text);
  const r = new SecretRedactor();
  const out: Buffer[] = [];
  let from = 0;
  for (const c of [...cuts.filter((c) => c > 0 && c < bytes.length).sort((a, b) => a - b), bytes.length]) {
    out.push(r.push(bytes.subarray(from, c)));
    from = c;
  }
  out.push(r.end());
  return Buffer.concat(out).toString("utf8");
}

const HASH = "$2a$04$0123456789012345678901uK8b9pVKY2z4Bf8e6l5rO6hW1n3Z2xS";

/** Keys that are secrets, spelt as JSON allows, and keys or text that only look like them. */
const key = fc.constantFrom("password", "password_hash", "username", "passwords", "Password", "pass", "a");
const text = fc.oneof(
  fc.string(),
  fc.constantFrom(HASH, '"password":"x"', '{\\"password\\":\\"y\\"}', "\\", '\\"', "ü☃😀", "password"),
);
const json = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    text,
    fc.integer(),
    fc.constant(null),
    fc.boolean(),
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(key, tie("value"), { maxKeys: 4 }),
  ),
})).value;

describe("the redactor", () => {
  test("replaces what the reference replaces, however the text is cut and spaced", () => {
    fc.assert(
      fc.property(
        json,
        fc.constantFrom(undefined, 1, "\t"),
        fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 8 }),
        (value, indent, at) => {
          const text = JSON.stringify(value, null, indent);
          const cuts = at.map((f) => Math.floor(f * Buffer.byteLength(text)));
          assert.deepEqual(JSON.parse(scanned(text, cuts)), reference(value));
        },
      ),
      { numRuns: 3000 },
    );
  });

  test("a route's account, cut at every byte, reads <redacted>; text inside strings is left alone", () => {
    const route = {
      handle: [
        {
          handler: "authentication",
          providers: { http_basic: { accounts: [{ username: "ann", password: HASH }], realm: "r" } },
        },
        { handler: "static_response", body: '{"password":"not-a-member"}\\' },
      ],
      request: { basic_auth: { users: [{ username: "ann", password_hash: HASH }] } },
    };
    const text = JSON.stringify(route);
    for (let i = 0; i <= Buffer.byteLength(text); i++)
      for (const j of [i + 1, i + 7]) {
        const out = scanned(text, [i, j]);
        assert.ok(!out.includes("$2a$"), `cut at ${i}, ${j}: ${out}`);
        assert.deepEqual(JSON.parse(out), reference(route));
      }
  });

  test("spaces around the colon are read; values other than strings are kept", () => {
    const out = redactText('{"password_hash" :\n "h2","password":null,"password":{"a":1},"p":"\\\\"}');
    assert.equal(out, `{"password_hash" :\n "${REDACTED}","password":null,"password":{"a":1},"p":"\\\\"}`);
  });

  test("text without secrets comes back as it was (the same string)", () => {
    const text = JSON.stringify({ routes: [{ "@id": "a", password_policy: "x" }] });
    assert.equal(redactText(text), text);
  });

  test("a stream is redacted chunk by chunk, and its error fails the result", async () => {
    const body = JSON.stringify([{ password: HASH }, { password: HASH }]);
    const chunks = [body.slice(0, 5), body.slice(5, 20), body.slice(20)].map((s) => Buffer.from(s));
    const out: Buffer[] = [];
    for await (const c of redactStream(Readable.from(chunks))) out.push(c as Buffer);
    assert.deepEqual(JSON.parse(Buffer.concat(out).toString()), [
      { password: REDACTED },
      { password: REDACTED },
    ]);

    const failing = new Readable({ read() {} });
    const redacted = redactStream(failing);
    failing.push(Buffer.from('[{"password":"$2a'));
    failing.destroy(new Error("Caddy broke off"));
    await assert.rejects(async () => {
      for await (const _ of redacted);
    }, /Caddy broke off/);
  });
});
