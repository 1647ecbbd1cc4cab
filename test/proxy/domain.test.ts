import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { domainToASCII } from "node:url";
import fc from "fast-check";
import { normalizeDomain, parseDial } from "../../src/proxy/route/domain.js";

const HOST_LABEL = /^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?$/;
/** The full stops UTS #46 maps to `.`: ASCII, ideographic, full-width, half-width ideographic. */
const FULL_STOPS = [".", "\u3002", "\uFF0E", "\uFF61"];

const ok = (d: string): string => {
  const r = normalizeDomain(d);
  assert.ok(r.ok, `${JSON.stringify(d)}: ${r.ok ? "" : r.message}`);
  return r.domain;
};

// Labels as people write them: ASCII letters of either case, digits, inner hyphens, and Unicode letters.
const asciiLabel = fc.stringMatching(/^[A-Za-z0-9]([A-Za-z0-9-]{0,20}[A-Za-z0-9])?$/);
const unicodeLabel = fc
  .array(fc.constantFrom(..."abcdeäöüßéñçøåæœžłğışдлжяσλπ中文字"), { minLength: 1, maxLength: 12 })
  .map((cs) => cs.join(""));
const label = fc.oneof(asciiLabel, unicodeLabel).filter((l) => !/^..--/.test(l));
// A numeric last label would make the name an IPv4 address; a top-level domain has letters.
const tld = fc.oneof(fc.stringMatching(/^[A-Za-z]{2,8}$/), unicodeLabel);
const domain = fc.tuple(fc.array(label, { maxLength: 4 }), tld).map(([ls, top]) => [...ls, top].join("."));
const validDomain = domain.filter((d) => normalizeDomain(d).ok);
/** Names whose case can be changed without changing the name (ß upper-cases to SS, a different label). */
const caseStable = validDomain.filter((d) => d.toUpperCase().toLowerCase() === d.toLowerCase());

describe("the route id rule (ToASCII, then drop one trailing dot)", () => {
  test("examples from docs/api/proxy-routes.md", () => {
    assert.equal(ok("App.Bücher.example."), "app.xn--bcher-kva.example");
    assert.equal(ok("*.Example.COM"), "*.example.com");
    assert.equal(ok("xn--bcher-kva.example"), "xn--bcher-kva.example");
    assert.equal(ok("XN--BCHER-KVA.example"), "xn--bcher-kva.example");
    assert.equal(ok("ideo-trailing.test\u3002"), "ideo-trailing.test");
    assert.equal(ok("a\uFF0Eb\uFF61c"), "a.b.c");
    assert.equal(ok("ＡＢＣ.example"), "abc.example");
    assert.equal(ok("*.bücher.example"), "*.xn--bcher-kva.example");
    assert.equal(ok("192.0.2.10"), "192.0.2.10");
  });

  test("refuses what cannot be a host", () => {
    for (const bad of [
      "",
      " ",
      ".",
      "\u3002",
      "a..b",
      "a.test..",
      "a.test.\u3002",
      "-a.test",
      "a/b.test",
      "a.test:80",
      "*",
      "*.",
      "a.*.test",
      "*.*.test",
      "a*b.test",
      `${"a".repeat(64)}.test`,
      `${"a.".repeat(126)}ab`,
      "xn--a.test",
      "xn--zz.test",
      "xn--a-.test",
      "xn--BCHER-KVA.xn--a.test",
      "a b.test",
      "a\tb.test",
      "127.1",
      "0x7f.0.0.1",
      "0",
      "*.192.0.2.10",
    ])
      assert.equal(normalizeDomain(bad).ok, false, JSON.stringify(bad));
  });

  test("a valid result is lowercase ASCII labels of at most 63, 253 in all", () => {
    fc.assert(
      fc.property(fc.boolean(), validDomain, (wild, d) => {
        const id = ok(wild ? `*.${d}` : d);
        const host = wild ? id.slice(2) : id;
        assert.ok(host.length <= 253);
        for (const l of host.split(".")) assert.match(l, HOST_LABEL);
        assert.equal(id, id.toLowerCase());
      }),
    );
  });

  test("case does not matter", () => {
    fc.assert(
      fc.property(caseStable, (d) => {
        assert.equal(ok(d.toUpperCase()), ok(d));
        assert.equal(ok(d.toLowerCase()), ok(d));
      }),
    );
  });

  test("one trailing dot of any kind is dropped; two are refused", () => {
    fc.assert(
      fc.property(validDomain, fc.constantFrom(...FULL_STOPS), fc.constantFrom(...FULL_STOPS), (d, a, b) => {
        assert.equal(ok(`${d}${a}`), ok(d));
        assert.equal(normalizeDomain(`${d}${a}${b}`).ok, false);
      }),
    );
  });

  test("any full stop separates labels like an ASCII dot", () => {
    fc.assert(
      fc.property(validDomain, fc.constantFrom(...FULL_STOPS), (d, dot) => {
        assert.equal(ok(d.split(".").join(dot)), ok(d));
      }),
    );
  });

  test("Unicode labels become their punycode, and punycode stays as it is", () => {
    fc.assert(
      fc.property(validDomain, (d) => {
        const id = ok(d);
        assert.equal(id, domainToASCII(d.toLowerCase()));
        assert.equal(ok(id), id);
      }),
    );
  });

  test("a leading *. is a wildcard of the same domain; * anywhere else is refused", () => {
    fc.assert(
      fc.property(validDomain, fc.integer({ min: 1, max: 4 }), (d, at) => {
        assert.equal(ok(`*.${d}`), `*.${ok(d)}`);
        assert.equal(ok(`*\u3002${d}`), `*.${ok(d)}`);
        const labels = d.split(".");
        labels.splice(Math.min(at, labels.length), 0, "*");
        if (labels[0] !== "*") assert.equal(normalizeDomain(labels.join(".")).ok, false);
      }),
    );
  });

  test("normalising is idempotent", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 40 }), (s) => {
        const r = normalizeDomain(s);
        if (r.ok) assert.equal(ok(r.domain), r.domain);
      }),
    );
  });
});

describe("the upstream dial rule", () => {
  test("host:port with a port in 1-65535; names are written in their id form", () => {
    const good: [string, string][] = [
      ["127.0.0.1:80", "127.0.0.1:80"],
      ["localhost:65535", "localhost:65535"],
      ["[::1]:8080", "[::1]:8080"],
      ["app.internal:3000", "app.internal:3000"],
      ["App.Internal:3000", "app.internal:3000"],
      ["bücher.internal:80", "xn--bcher-kva.internal:80"],
    ];
    for (const [dial, written] of good) assert.deepEqual(parseDial(dial), { ok: true, dial: written }, dial);
  });

  test("refuses whitespace anywhere and everything that is not host:port", () => {
    for (const bad of [
      " 127.0.0.1:80",
      "127.0.0.1 :80",
      "127.0.0.1: 80",
      "127.0.0.1:80 ",
      "\tlocalhost:80",
      "local\u00a0host:80",
      "localhost:80\n",
      "127.0.0.1",
      "127.0.0.1:0",
      "127.0.0.1:65536",
      ":80",
      "[::1]",
      "::1:80",
      "[zz]:80",
      "a b:80",
      "http://x:80",
      "x:080",
      "*.x:80",
    ])
      assert.equal(parseDial(bad).ok, false, JSON.stringify(bad));
  });

  test("whitespace inserted anywhere in a valid dial is refused", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("127.0.0.1:80", "localhost:8080", "[::1]:443", "app.internal:3000"),
        fc.nat(),
        fc.constantFrom(" ", "\t", "\n", "\r", "\u00a0", "\u2003", "\u3000", "\v", "\f"),
        (dial, at, ws) => {
          const i = at % (dial.length + 1);
          assert.equal(parseDial(dial.slice(0, i) + ws + dial.slice(i)).ok, false);
        },
      ),
    );
  });
});
