import assert from "node:assert/strict";
import { test } from "node:test";
import pino from "pino";
import { Periodic, type PeriodicOptions } from "../src/util/periodic.js";
import { sleep } from "../src/util/timers.js";
import { waitFor } from "./helpers/wait.js";

/* The one helper of the agent's background loops: rounds never overlap, waits are the interval or what a
 * round answers, a round can be brought forward, pause and stop wait for the round under way. */

const log = pino({ level: "silent" });

function loop(
  t: { after: (fn: () => unknown) => void },
  o: Partial<PeriodicOptions> & Pick<PeriodicOptions, "round">,
) {
  const p = new Periodic({ what: "a test round", log, ...o });
  t.after(() => p.stop());
  return p;
}

test("rounds come every interval, never two at once, and none after stop", async (t) => {
  let rounds = 0;
  let running = 0;
  let overlapped = false;
  const p = loop(t, {
    intervalMs: 5,
    round: async () => {
      rounds++;
      running++;
      overlapped ||= running > 1;
      await sleep(20);
      running--;
    },
  });
  p.start();
  await waitFor("three rounds", () => (rounds >= 3 ? true : undefined));
  await p.stop();
  const after = rounds;
  await sleep(50);
  assert.equal(rounds, after, "no round after stop");
  assert.equal(overlapped, false);
  assert.equal(running, 0, "stop waited for the round under way");
});

test("a round's answer is the wait before the next; Infinity waits for soon or runNow", async (t) => {
  const at: number[] = [];
  const answers = [Number.POSITIVE_INFINITY, 10];
  const p = loop(t, {
    intervalMs: 60_000,
    round: () => {
      at.push(Date.now());
      return answers.shift() ?? Number.POSITIVE_INFINITY;
    },
  });
  p.start();
  assert.equal(at.length, 0, "the first round comes after the interval");
  await p.runNow();
  assert.equal(at.length, 1, "runNow runs a synchronous round before it returns");
  await sleep(30);
  assert.equal(at.length, 1, "Infinity: no round until asked");
  p.soon(0);
  await waitFor("the round asked for, then the one 10 ms on", () => (at.length >= 3 ? true : undefined));
});

test("soon during a round brings the next one forward once it ends; a failed round is logged and retried", async (t) => {
  let rounds = 0;
  let release = () => {};
  const p = loop(t, {
    intervalMs: 60_000,
    round: async () => {
      rounds++;
      if (rounds === 1) {
        await new Promise<void>((r) => {
          release = r;
        });
        throw new Error("first round fails");
      }
    },
  });
  p.start();
  const first = p.runNow();
  p.soon(0);
  assert.equal(rounds, 1, "no second round while the first runs");
  release();
  await first;
  await waitFor("the round asked for meanwhile", () => (rounds >= 2 ? true : undefined));
});

test("pause holds rounds until resume; stop is final", async (t) => {
  let rounds = 0;
  const p = loop(t, {
    intervalMs: 5,
    round: () => {
      rounds++;
    },
  });
  p.start();
  await waitFor("a round", () => (rounds >= 1 ? true : undefined));
  await p.pause();
  const paused = rounds;
  p.soon(0);
  await sleep(30);
  assert.equal(rounds, paused, "no round while paused");
  p.resume();
  await waitFor("rounds again", () => (rounds > paused ? true : undefined));
  await p.stop();
  p.resume();
  p.start();
  const stopped = rounds;
  await sleep(30);
  assert.equal(rounds, stopped);
});
