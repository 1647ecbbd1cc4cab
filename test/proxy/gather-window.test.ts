import assert from "node:assert/strict";
import { once } from "node:events";
import { stat } from "node:fs";
import net from "node:net";
import { test } from "node:test";
import { GatherWindow } from "../../src/proxy/gather-window.js";

/** A window on a clock of its own: `sleep` moves the clock and lets `during` add changes meanwhile. */
function windowOnClock(during: (at: number) => number = () => 0) {
  let clock = 0;
  let arrived = 1;
  const sleeps: number[] = [];
  const w = new GatherWindow({
    share: 0.05,
    maxMs: 100,
    quietMs: 10,
    now: () => clock,
    sleep: async (ms) => {
      sleeps.push(ms);
      clock += ms;
      arrived += during(clock);
    },
  });
  return { w, sleeps, waited: () => clock, arrived: () => arrived };
}

test("a change alone goes at once when the last write was fast", async () => {
  const { w, sleeps } = windowOnClock();
  await w.gather(() => 1);
  assert.deepEqual(sleeps, [], "no write yet");
  w.wrote(7);
  assert.equal(w.boundMs(), 0);
  await w.gather(() => 1);
  assert.deepEqual(sleeps, [], "a 7 ms write");
});

test("after a slow write a change alone waits the quiet time only", async () => {
  const { w, waited } = windowOnClock();
  w.wrote(1400);
  assert.equal(w.boundMs(), 70);
  await w.gather(() => 1);
  assert.equal(waited(), 10);
});

test("followers arriving inside the window keep it open, and it ends once they stop", async () => {
  // Two changes come in each of the first three waits, then none.
  const { w, waited, arrived } = windowOnClock((at) => (at <= 30 ? 2 : 0));
  w.wrote(1400);
  await w.gather(arrived);
  assert.equal(arrived(), 7);
  assert.equal(waited(), 40);
});

test("the window never exceeds its bound, however long changes keep coming", async () => {
  const { w, waited, arrived, sleeps } = windowOnClock(() => 1);
  w.wrote(1000);
  await w.gather(arrived);
  assert.equal(waited(), 50);
  assert.ok(sleeps.every((ms) => ms <= 10));
  w.wrote(60_000);
  assert.equal(w.boundMs(), 100, "the bound is capped");
});

test("a small bound keeps a change alone's wait small: a quarter of it", async () => {
  const { w, waited } = windowOnClock();
  w.wrote(80);
  assert.equal(w.boundMs(), 4);
  await w.gather(() => 1);
  assert.equal(waited(), 1);
});

test("a change that already waited behind the writer's other work waits only what is left of the bound", async () => {
  const { w, waited, arrived } = windowOnClock(() => 1);
  w.wrote(1000);
  assert.equal(w.leftMs(20), 30);
  await w.gather(arrived, 20);
  assert.equal(waited(), 30, "changes kept coming: the rest of the bound, not all of it");
  assert.equal(w.leftMs(50), 0);
  assert.equal(w.leftMs(400), 0);
  const before = waited();
  await w.gather(arrived, 400);
  assert.equal(waited(), before, "one that waited the whole bound goes at once");
});

test("a change that came while the event loop was busy past the quiet time keeps the window open", async (t) => {
  // Real timers and a real socket: timers run before the I/O that came meanwhile, so without looking at that
  // I/O first the window would close on the arrival it had not read yet.
  let arrivals = 0;
  const server = net.createServer((socket) => socket.on("data", () => arrivals++));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const client = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
  await once(client, "connect");
  await new Promise((r) => setTimeout(r, 20));
  t.after(() => {
    client.destroy();
    server.close();
  });
  const w = new GatherWindow({ share: 0.1, maxMs: 250, quietMs: 10 });
  w.wrote(5000);
  const seen: number[] = [];
  // Busy in an I/O callback, as the agent is when it parses a request: the window opens there (its quiet
  // timer starts then, whatever the machine's load made the callback wait), the change arrives and the
  // quiet time passes while nothing runs, and the loop next runs its timers.
  const gathering = await new Promise<Promise<void>>((resolve) =>
    stat(import.meta.filename, () => {
      const g = w.gather(() => {
        seen.push(arrivals);
        return arrivals;
      });
      client.write("a change");
      const until = performance.now() + 40;
      while (performance.now() < until) {
        // nothing runs meanwhile
      }
      resolve(g);
    }),
  );
  await gathering;
  assert.equal(
    seen.at(-1),
    1,
    `the window saw the change that came while it was busy (saw ${seen.join(", ")})`,
  );
});
