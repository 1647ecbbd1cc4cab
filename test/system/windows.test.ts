import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  isKnownTimeZone,
  localToInstant,
  nextSlot,
  runTime,
  type Slot,
  slotsBetween,
  type Window,
} from "../../src/system/schedule/windows.js";

const at = (s: string) => Date.parse(s);
const MINUTE = 60_000;
/** Slots as UTC strings, for messages a reader can check against a calendar. */
const show = (slots: Slot[]) =>
  slots.map((s) => `${new Date(s.start).toISOString()}/${(s.end - s.start) / MINUTE}`);

describe("local times in a time zone", () => {
  test("an ordinary local time is its one instant", () => {
    assert.equal(localToInstant("Europe/Berlin", at("2026-06-10T02:30:00Z")), at("2026-06-10T00:30:00Z"));
    assert.equal(localToInstant("America/New_York", at("2026-01-10T02:30:00Z")), at("2026-01-10T07:30:00Z"));
  });

  test("a local time the clocks skip moves to the first minute after the skip", () => {
    // 2026-03-29 in Berlin: 02:00 CET becomes 03:00 CEST (01:00Z); 02:00-02:59 do not exist.
    for (const local of ["02:00", "02:30", "02:59"])
      assert.equal(
        localToInstant("Europe/Berlin", at(`2026-03-29T${local}:00Z`)),
        at("2026-03-29T01:00:00Z"),
        local,
      );
    assert.equal(localToInstant("Europe/Berlin", at("2026-03-29T03:00:00Z")), at("2026-03-29T01:00:00Z"));
    // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00Z).
    assert.equal(localToInstant("America/New_York", at("2026-03-08T02:15:00Z")), at("2026-03-08T07:00:00Z"));
    // Lord Howe Island moves by half an hour: 2026-10-04, 02:00 (+10:30) becomes 02:30 (+11).
    assert.equal(
      localToInstant("Australia/Lord_Howe", at("2026-10-04T02:10:00Z")),
      at("2026-10-03T15:30:00Z"),
    );
  });

  test("a local time that happens twice is its first occurrence", () => {
    // 2026-10-25 in Berlin: 03:00 CEST becomes 02:00 CET; 02:30 happens at 00:30Z and at 01:30Z.
    assert.equal(localToInstant("Europe/Berlin", at("2026-10-25T02:30:00Z")), at("2026-10-25T00:30:00Z"));
    // New York, 2026-11-01: 01:30 happens at 05:30Z (EDT) and 06:30Z (EST).
    assert.equal(localToInstant("America/New_York", at("2026-11-01T01:30:00Z")), at("2026-11-01T05:30:00Z"));
  });

  test("a day the zone skipped whole moves to the next day's first minute", () => {
    // Samoa skipped 2011-12-30 crossing the date line: 2011-12-29 23:59 (-10) was followed by 2011-12-31
    // 00:00 (+14), the instant 2011-12-30T10:00Z.
    const midnight = at("2011-12-30T10:00:00Z");
    assert.equal(localToInstant("Pacific/Apia", at("2011-12-31T00:00:00Z")), midnight);
    for (const local of ["00:00", "10:00", "23:59"])
      assert.equal(localToInstant("Pacific/Apia", at(`2011-12-30T${local}:00Z`)), midnight, local);
    assert.equal(localToInstant("Pacific/Apia", at("2011-12-29T23:59:00Z")), midnight - MINUTE);
  });

  test("known zones are the named ones Intl knows", () => {
    for (const z of ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Etc/GMT+1"])
      assert.equal(isKnownTimeZone(z), true, z);
    for (const z of ["Mars/Olympus", "+01:00", "-05:00", "local", ""])
      assert.equal(isKnownTimeZone(z), false, z);
  });
});

describe("slots", () => {
  const daily = (start: string, duration_minutes: number): Window => ({
    days: ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
    start,
    duration_minutes,
  });

  test("a daily window across spring forward: one slot a day, the skipped one at the end of the gap", () => {
    const slots = slotsBetween(
      [daily("02:30", 60)],
      "Europe/Berlin",
      at("2026-03-27T12:00:00Z"),
      at("2026-03-30T12:00:00Z"),
    );
    assert.deepEqual(show(slots), [
      "2026-03-28T01:30:00.000Z/60",
      "2026-03-29T01:00:00.000Z/60",
      "2026-03-30T00:30:00.000Z/60",
    ]);
  });

  test("a daily window across fall back: one slot a day, the doubled time once", () => {
    const slots = slotsBetween(
      [daily("02:30", 60)],
      "Europe/Berlin",
      at("2026-10-23T12:00:00Z"),
      at("2026-10-26T12:00:00Z"),
    );
    assert.deepEqual(show(slots), [
      "2026-10-24T00:30:00.000Z/60",
      "2026-10-25T00:30:00.000Z/60",
      "2026-10-26T01:30:00.000Z/60",
    ]);
  });

  test("a window lasts its minutes whatever the clocks do meanwhile", () => {
    // Opens 01:00 CET on the night of spring forward and lasts 3 real hours: until 05:00 CEST.
    const [slot] = slotsBetween(
      [daily("01:00", 180)],
      "Europe/Berlin",
      at("2026-03-29T00:00:00Z"),
      at("2026-03-29T00:00:00Z"),
    );
    assert.deepEqual(show(slot ? [slot] : []), ["2026-03-29T00:00:00.000Z/180"]);
  });

  test("a window across midnight belongs to the day it opens, and is open after midnight", () => {
    const windows: Window[] = [{ days: ["mon"], start: "23:00", duration_minutes: 120 }];
    // 2026-06-08 is a Monday.
    const open = nextSlot(windows, "UTC", at("2026-06-09T00:30:00Z"));
    assert.deepEqual(show(open ? [open] : []), ["2026-06-08T23:00:00.000Z/120"]);
    const after = nextSlot(windows, "UTC", at("2026-06-09T01:00:00Z"));
    assert.deepEqual(
      show(after ? [after] : []),
      ["2026-06-15T23:00:00.000Z/120"],
      "the end is not part of it",
    );
    // Sunday 23:30 to Monday: the Sunday window only, not a Monday one.
    const sunday: Window[] = [{ days: ["sun"], start: "23:30", duration_minutes: 60 }];
    assert.deepEqual(
      show(slotsBetween(sunday, "UTC", at("2026-06-08T00:00:00Z"), at("2026-06-08T23:59:00Z"))),
      ["2026-06-07T23:30:00.000Z/60"],
    );
  });

  test("weekdays are the local ones", () => {
    // Monday 01:00 in Tokyo is Sunday 16:00 UTC.
    const windows: Window[] = [{ days: ["mon"], start: "01:00", duration_minutes: 30 }];
    const slot = nextSlot(windows, "Asia/Tokyo", at("2026-06-06T00:00:00Z"));
    assert.deepEqual(show(slot ? [slot] : []), ["2026-06-07T16:00:00.000Z/30"]);
  });

  test("the slots a stopped agent missed are those that opened and closed meanwhile", () => {
    const windows: Window[] = [{ days: ["tue", "thu"], start: "03:00", duration_minutes: 60 }];
    // Down from Monday noon to Friday 03:30 (2026-06-08 is a Monday): Tuesday's and Thursday's slots closed,
    // none was open at either end.
    const down = at("2026-06-08T12:00:00Z");
    const back = at("2026-06-12T03:30:00Z");
    const closed = slotsBetween(windows, "UTC", down, back).filter((s) => s.end <= back);
    assert.deepEqual(show(closed), ["2026-06-09T03:00:00.000Z/60", "2026-06-11T03:00:00.000Z/60"]);
    // Back on Thursday at 03:30: Tuesday's is missed, Thursday's is open and still runs.
    const thursday = at("2026-06-11T03:30:00Z");
    const seen = slotsBetween(windows, "UTC", down, thursday);
    assert.deepEqual(
      seen.map((s) => (s.end <= thursday ? "missed" : "open")),
      ["missed", "open"],
    );
  });

  test("windows opening at the same instant are one slot, the longest; overlapping ones are two", () => {
    const windows: Window[] = [
      { days: ["wed"], start: "04:00", duration_minutes: 30 },
      { days: ["wed"], start: "04:00", duration_minutes: 90 },
      { days: ["wed"], start: "04:15", duration_minutes: 10 },
    ];
    assert.deepEqual(
      show(slotsBetween(windows, "UTC", at("2026-06-10T00:00:00Z"), at("2026-06-10T23:00:00Z"))),
      ["2026-06-10T04:00:00.000Z/90", "2026-06-10T04:15:00.000Z/10"],
    );
  });

  test("the next slot is never more than a week away", () => {
    const windows: Window[] = [{ days: ["sat"], start: "00:00", duration_minutes: 1 }];
    // 2026-06-13 is a Saturday; just after its slot closed, the next is a week later.
    const slot = nextSlot(windows, "UTC", at("2026-06-13T00:01:00Z"));
    assert.deepEqual(show(slot ? [slot] : []), ["2026-06-20T00:00:00.000Z/1"]);
  });
});

describe("random delay", () => {
  const slot: Slot = { start: at("2026-06-10T02:00:00Z"), end: at("2026-06-10T02:30:00Z") };

  test("from the slot's start up to the delay, never at or past the end", () => {
    assert.equal(runTime(slot, 10, 0), slot.start);
    assert.equal(runTime(slot, 0, 0.99), slot.start, "no delay asked");
    assert.equal(runTime(slot, 10, 0.5), slot.start + 5 * MINUTE);
    for (let i = 0; i < 1000; i++) {
      const t = runTime(slot, 10, i / 1000);
      assert.ok(t >= slot.start && t < slot.start + 10 * MINUTE, `fraction ${i / 1000}`);
    }
  });

  test("a delay as long as the window ends before it, whatever the draw", () => {
    for (const fraction of [0.999999999, 1, 2])
      assert.ok(runTime(slot, 30, fraction) < slot.end, `fraction ${fraction}`);
    assert.ok(runTime(slot, 1440, 0.9999) < slot.end, "a delay longer than the slot is cut to it");
  });
});
