import assert from "node:assert/strict";
import { test } from "node:test";
import { doubling, retried } from "../src/util/retry.js";

/* The one retry of the agent: attempts, waits, which failures retry, the check before a retry, the signal. */

const failing = (errors: unknown[], value = "done") => {
  let calls = 0;
  const attempt = async () => {
    const err = errors[calls++];
    if (err !== undefined) throw err;
    return value;
  };
  return { attempt, calls: () => calls };
};

test("retries a retryable failure until an attempt succeeds, waiting the delays asked", async () => {
  const f = failing([new Error("a"), new Error("b")]);
  const waits: number[] = [];
  const value = await retried(f.attempt, {
    attempts: 3,
    delayMs: (n) => {
      waits.push(n);
      return 1;
    },
  });
  assert.equal(value, "done");
  assert.equal(f.calls(), 3);
  assert.deepEqual(waits, [0, 1]);
});

test("the last attempt's failure, and one that is not retryable, are thrown as they came", async () => {
  const last = new Error("last");
  const f = failing([new Error("first"), last]);
  await assert.rejects(retried(f.attempt, { attempts: 2, delayMs: () => 1 }), (err) => err === last);
  const refused = new Error("for good");
  const g = failing([refused]);
  await assert.rejects(
    retried(g.attempt, { attempts: 5, delayMs: () => 1, retryable: (err) => err !== refused }),
    (err) => err === refused,
  );
  assert.equal(g.calls(), 1);
});

test("a check that says no (or fails) ends the retries with the failure", async () => {
  const err = new Error("maybe landed");
  for (const check of [async () => false, async () => Promise.reject(new Error("check broke"))]) {
    const f = failing([err]);
    await assert.rejects(retried(f.attempt, { attempts: 3, delayMs: () => 1, check }), (e) => e === err);
    assert.equal(f.calls(), 1);
  }
  const f = failing([err]);
  assert.equal(await retried(f.attempt, { attempts: 3, delayMs: () => 1, check: async () => true }), "done");
});

test("an aborted signal cuts the wait short and throws the last failure", async () => {
  const err = new Error("down");
  const f = failing([err, err]);
  const controller = new AbortController();
  const started = Date.now();
  setTimeout(() => controller.abort(new Error("stopping")), 10);
  await assert.rejects(
    retried(f.attempt, { attempts: 3, delayMs: () => 60_000, signal: controller.signal }),
    (e) => e === err,
  );
  assert.ok(Date.now() - started < 30_000);
  assert.equal(f.calls(), 1);
});

test("doubling waits, capped", () => {
  assert.deepEqual([0, 1, 2, 3, 10].map(doubling(25)), [25, 50, 100, 200, 25_600]);
  assert.deepEqual([0, 5, 6, 7].map(doubling(10, 640)), [10, 320, 640, 640]);
});
