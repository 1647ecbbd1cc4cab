import assert from "node:assert/strict";
import { test } from "node:test";
import { parsePrefer, preferredWaitSeconds } from "../../src/http/prefer.js";

const summary = (h: string | string[] | undefined) =>
  Object.fromEntries(
    [...parsePrefer(h)].map(([name, p]) => [name, [p.value ?? null, Object.fromEntries(p.params)]]),
  );

test("Prefer (RFC 7240): several preferences and header lines, any case, values, parameters, quoted strings", () => {
  assert.deepEqual(summary("respond-async"), { "respond-async": [null, {}] });
  assert.deepEqual(summary("Respond-Async , WAIT = 10"), { "respond-async": [null, {}], wait: ["10", {}] });
  assert.deepEqual(summary(["handling=lenient", "respond-async; a=1;B"]), {
    handling: ["lenient", {}],
    "respond-async": [null, { a: "1", b: undefined }],
  });
  assert.deepEqual(summary('foo="a, b; c", respond-async'), {
    foo: ["a, b; c", {}],
    "respond-async": [null, {}],
  });
  assert.deepEqual(summary('x="say \\"hi\\""'), { x: ['say "hi"', {}] });
  // The first occurrence counts.
  assert.deepEqual(summary("wait=5, wait=50"), { wait: ["5", {}] });
  // Malformed preferences are ignored, the others kept.
  assert.deepEqual(summary('bad name, "quoted", x="open, respond-async'), {});
  assert.deepEqual(summary("x=, respond-async, ,"), { "respond-async": [null, {}] });
  assert.deepEqual(summary(undefined), {});
  assert.deepEqual(summary("respond-asyncx"), { "respond-asyncx": [null, {}] });
});

test("Prefer wait= is a number of seconds or ignored", () => {
  assert.equal(preferredWaitSeconds(parsePrefer("respond-async, wait=100")), 100);
  assert.equal(preferredWaitSeconds(parsePrefer('wait="7"')), 7);
  assert.equal(preferredWaitSeconds(parsePrefer("wait=-1")), undefined);
  assert.equal(preferredWaitSeconds(parsePrefer("wait=1.5")), undefined);
  assert.equal(preferredWaitSeconds(parsePrefer("respond-async")), undefined);
});
