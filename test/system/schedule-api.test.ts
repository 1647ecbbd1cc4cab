import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import { auditMigrations } from "../../src/access/audit-store.js";
import { outboxMigrations } from "../../src/events/store.js";
import { operatorMigrations } from "../../src/operator/store.js";
import { proxyMigrations } from "../../src/proxy/store.js";
import { openDatabase } from "../../src/store/db.js";
import { systemMigrations } from "../../src/system/migrations.js";
import { buildTestApp } from "../helpers/app.js";

/*
 * No package manager may run in this file: its windows never open while it runs, and no request reaches apt.
 * Should one run all the same, buildTestApp gives apt a configuration whose root is an empty folder of its
 * own (nothing to upgrade there) and a reboot command that does nothing.
 */
const ENV = {
  HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
  HOSTKEEPER_PACKAGE_MANAGER: "apt",
  HOSTKEEPER_WEBHOOK_DENY_CIDRS: "10.0.0.0/8",
};

const MINUTE = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();
const WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
/** Three hours from now, to the minute (UTC): the windows of this file are never open while it runs. */
const later = () => Math.floor(Date.now() / MINUTE) * MINUTE + 180 * MINUTE;
const valid = (opens = later()) => ({
  windows: [{ days: [...WEEKDAYS], start: iso(opens).slice(11, 16), duration_minutes: 30 }],
  timezone: "UTC",
  update_type: "security",
  reboot: "if_required",
});

describe("the schedule's endpoints", () => {
  test("without a schedule, GET and DELETE are 404 schedule_not_found", async (t) => {
    const { call } = await buildTestApp(t, ENV);
    for (const method of ["GET", "DELETE"]) {
      const r = await call({ method, url: "/v1/system/schedule" });
      assert.equal(r.statusCode, 404, r.body);
      assert.equal(r.json().code, "schedule_not_found");
      assert.match(r.headers["content-type"] ?? "", /^application\/problem\+json/);
    }
  });

  test("PUT sets the schedule with its defaults and next run, PUT again replaces it, DELETE removes it", async (t) => {
    const { call } = await buildTestApp(t, ENV);
    const opens = later();
    const put = await call({ method: "PUT", url: "/v1/system/schedule", payload: valid(opens) });
    assert.equal(put.statusCode, 200, put.body);
    assert.deepEqual(put.json(), {
      ...valid(opens),
      download_ahead_minutes: 0,
      random_delay_minutes: 0,
      callback_url: null,
      exclude: [],
      min_age_days: 0,
      security_min_age_days: 0,
      next_run_at: iso(opens),
      runs: [],
    });
    const got = await call({ method: "GET", url: "/v1/system/schedule" });
    assert.deepEqual(got.json(), put.json());

    const replaced = {
      ...valid(opens),
      timezone: "Europe/Berlin",
      update_type: "full",
      reboot: "never",
      random_delay_minutes: 30,
      download_ahead_minutes: 10,
      callback_url: "http://127.0.0.1:9/hook",
    };
    const again = await call({ method: "PUT", url: "/v1/system/schedule", payload: replaced });
    assert.equal(again.statusCode, 200, again.body);
    const body = again.json();
    assert.equal(body.timezone, "Europe/Berlin");
    assert.equal(body.callback_url, "http://127.0.0.1:9/hook");
    // The same wall-clock time in Berlin, plus a random delay of at most 30 minutes, within the day.
    const next = Date.parse(body.next_run_at);
    assert.ok(next > Date.now() && next < Date.now() + 86_400_000, body.next_run_at);
    assert.equal(
      (await call({ method: "GET", url: "/v1/system/schedule" })).json().timezone,
      "Europe/Berlin",
    );

    const del = await call({ method: "DELETE", url: "/v1/system/schedule" });
    assert.equal(del.statusCode, 204, del.body);
    assert.equal(del.body, "");
    assert.equal((await call({ method: "GET", url: "/v1/system/schedule" })).statusCode, 404);
  });

  test("each rule answers 400 validation_failed naming the field, and nothing is set", async (t) => {
    const { call } = await buildTestApp(t, ENV);
    const base = valid();
    const window = base.windows[0] as { days: string[]; start: string; duration_minutes: number };
    const withWindow = (w: object) => ({ ...base, windows: [{ ...window, ...w }] });
    const cases: [string, object, string][] = [
      ["unknown zone", { ...base, timezone: "Mars/Olympus" }, "body.timezone"],
      ["an offset is no zone", { ...base, timezone: "+01:00" }, "body.timezone"],
      ["no windows", { ...base, windows: [] }, "body.windows"],
      ["33 windows", { ...base, windows: Array(33).fill(window) }, "body.windows"],
      ["no days", withWindow({ days: [] }), "body.windows[0].days"],
      ["capitalised day", withWindow({ days: ["Mon"] }), "body.windows[0].days[0]"],
      ["day in full", withWindow({ days: ["tue", "monday"] }), "body.windows[0].days[1]"],
      ["24:00", withWindow({ start: "24:00" }), "body.windows[0].start"],
      ["one-digit hour", withWindow({ start: "7:00" }), "body.windows[0].start"],
      ["minute 60", withWindow({ start: "23:60" }), "body.windows[0].start"],
      ["0 minutes", withWindow({ duration_minutes: 0 }), "body.windows[0].duration_minutes"],
      ["1441 minutes", withWindow({ duration_minutes: 1441 }), "body.windows[0].duration_minutes"],
      ["fractional minutes", withWindow({ duration_minutes: 1.5 }), "body.windows[0].duration_minutes"],
      ["delay past the window", { ...base, random_delay_minutes: 31 }, "body.random_delay_minutes"],
      [
        "download ahead longer than the shorter window",
        { ...base, windows: [window, { ...window, duration_minutes: 10 }], download_ahead_minutes: 11 },
        "body.download_ahead_minutes",
      ],
      ["negative delay", { ...base, download_ahead_minutes: -1 }, "body.download_ahead_minutes"],
      ["update type", { ...base, update_type: "all" }, "body.update_type"],
      ["reboot policy", { ...base, reboot: "sometimes" }, "body.reboot"],
      ["denied callback", { ...base, callback_url: "http://10.1.2.3/hook" }, "body.callback_url"],
      ["unknown field", { ...base, extra: 1 }, "body.extra"],
    ];
    for (const [what, payload, field] of cases) {
      const r = await call({ method: "PUT", url: "/v1/system/schedule", payload });
      assert.equal(r.statusCode, 400, `${what}: ${r.body}`);
      const p = r.json();
      assert.equal(p.code, "validation_failed", what);
      assert.ok(
        p.errors.some((e: { field: string }) => e.field === field),
        `${what}: ${field} not in ${r.body}`,
      );
    }
    const both = await call({
      method: "PUT",
      url: "/v1/system/schedule",
      payload: {
        ...base,
        timezone: "Nowhere/Town",
        random_delay_minutes: 45,
        callback_url: "http://10.0.0.1/",
      },
    });
    assert.deepEqual(
      both
        .json()
        .errors.map((e: { field: string }) => e.field)
        .sort(),
      ["body.callback_url", "body.random_delay_minutes", "body.timezone"],
      "every bad field in one answer",
    );
    assert.equal((await call({ method: "GET", url: "/v1/system/schedule" })).statusCode, 404, "nothing set");
  });

  test("the bounds themselves are accepted", async (t) => {
    const { call } = await buildTestApp(t, ENV);
    // Windows that cannot be open now: on the days that are neither today nor yesterday (UTC).
    const today = new Date().getUTCDay();
    const days = WEEKDAYS.filter((_, i) => i !== today && i !== (today + 6) % 7);
    const payload = {
      ...valid(),
      windows: [
        { days, start: "00:00", duration_minutes: 1440 },
        { days, start: "23:59", duration_minutes: 1 },
        ...Array(30).fill({ days, start: "12:00", duration_minutes: 1 }),
      ],
      download_ahead_minutes: 1,
      random_delay_minutes: 1,
    };
    const r = await call({ method: "PUT", url: "/v1/system/schedule", payload });
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(r.json().windows.length, 32);
    assert.deepEqual(r.json().runs, []);
  });

  test("the schedule's endpoints need the bearer token", async (t) => {
    const { app } = await buildTestApp(t, ENV);
    for (const method of ["GET", "PUT", "DELETE"] as const)
      assert.equal((await app.inject({ method, url: "/v1/system/schedule" })).statusCode, 401, method);
  });
});

/** A database in a new data dir as an agent left it before the system area's migration `name`. */
function databaseBefore(t: TestContext, name: string) {
  const dataDir = mkdtempSync(join(tmpdir(), "hk-data-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const db = openDatabase(dataDir, [
    ...outboxMigrations,
    ...proxyMigrations,
    ...systemMigrations.slice(
      0,
      systemMigrations.findIndex((m) => m.name === name),
    ),
    ...operatorMigrations,
    ...auditMigrations,
  ]);
  return { dataDir, db };
}

describe("trigger", () => {
  test("applies recorded before the field existed read as api", async (t) => {
    // The database as the agent left it before maintenance windows, with one apply.
    const { dataDir, db: before } = databaseBefore(t, "system.004_schedule");
    before
      .prepare(
        `INSERT INTO system_applies (request_id, requested_by, update_type, auto_reboot, package_manager, started_at,
           finished_at, duration_ms, outcome, state)
         VALUES ('old', '{"remote_address":"127.0.0.1","user_agent":null}', 'security', 0, 'apt',
           '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01.000Z', 1000, 'succeeded', 'completed')`,
      )
      .run();
    before.close();

    const { call } = await buildTestApp(t, ENV, { dataDir });
    const [old] = (await call({ method: "GET", url: "/v1/system/apply-history" })).json().applies;
    assert.equal(old.request_id, "old");
    assert.equal(old.trigger, "api");
    assert.equal((await call({ method: "GET", url: "/v1/system/applies/1" })).json().trigger, "api");
  });
});

describe("runs recorded before a run was a view of its apply", () => {
  const DAY = 86_400_000;
  const INTERRUPTED = "the agent stopped during the run; a slot never runs twice";
  const NO_REBOOT = "no reboot: it would have come after the end of the window";
  const MISSED = "the agent was not running while the window was open";
  const BUSY = "the package manager is held by process 4242";
  const NO_SPACE = "not enough free space to apply the updates: 10 MB free of 500 MB needed";
  /** The slot `n` days before now, at a whole minute. */
  const slot = (n: number) => iso(Math.floor(Date.now() / MINUTE) * MINUTE - n * DAY);

  /**
   * Every kind of run the earlier schema recorded, each with what the earlier agent would have shown for it
   * once started again: a run still `running` is as its apply ended (interrupted when it had not).
   */
  const cases: {
    slot: string;
    run: { state: string; reason?: string };
    apply?: { state: string; history: string[]; error?: { code: string; detail: string } };
    shown: { state: string; reason?: string };
  }[] = [
    {
      slot: slot(1),
      run: { state: "completed", reason: NO_REBOOT },
      apply: { state: "completed", history: ["queued", "downloading", "installing", "completed"] },
      shown: { state: "completed", reason: NO_REBOOT },
    },
    {
      slot: slot(2),
      run: { state: "refused", reason: BUSY },
      apply: {
        state: "failed",
        history: ["queued", "downloading", "failed"],
        error: { code: "package_manager_busy", detail: BUSY },
      },
      shown: { state: "refused", reason: BUSY },
    },
    {
      slot: slot(3),
      run: { state: "failed", reason: "dpkg failed" },
      apply: {
        state: "failed",
        history: ["queued", "downloading", "installing", "failed"],
        error: { code: "apply_failed", detail: "dpkg failed" },
      },
      shown: { state: "failed", reason: "dpkg failed" },
    },
    {
      slot: slot(4),
      run: { state: "interrupted", reason: INTERRUPTED },
      apply: { state: "interrupted", history: ["queued", "downloading", "interrupted"] },
      shown: { state: "interrupted", reason: INTERRUPTED },
    },
    {
      slot: slot(5),
      run: { state: "running" },
      apply: { state: "installing", history: ["queued", "downloading", "installing"] },
      shown: { state: "interrupted", reason: INTERRUPTED },
    },
    {
      slot: slot(6),
      run: { state: "running" },
      apply: {
        state: "reboot_scheduled",
        history: ["queued", "downloading", "installing", "reboot_scheduled"],
      },
      shown: { state: "completed" },
    },
    { slot: slot(7), run: { state: "missed", reason: MISSED }, shown: { state: "missed", reason: MISSED } },
    {
      slot: slot(8),
      run: { state: "refused", reason: NO_SPACE },
      shown: { state: "refused", reason: NO_SPACE },
    },
    {
      slot: slot(9),
      run: { state: "interrupted", reason: INTERRUPTED },
      shown: { state: "interrupted", reason: INTERRUPTED },
    },
    { slot: slot(10), run: { state: "running" }, shown: { state: "interrupted", reason: INTERRUPTED } },
  ];

  test("move into the applies and the slots without one, and read as they did", async (t) => {
    const { dataDir, db: old } = databaseBefore(t, "system.005_schedule_runs_in_applies");
    const addApply = old.prepare(
      `INSERT INTO system_applies (request_id, requested_by, update_type, auto_reboot, package_manager, started_at,
         outcome, state, error, updated_at, trigger)
       VALUES (@request_id, '{"remote_address":"local","user_agent":null}', 'security', 1, 'apt', @at, @outcome,
         @state, @error, @at, @trigger)`,
    );
    const addState = old.prepare(
      "INSERT INTO system_apply_states (apply_id, seq, state, at) VALUES (?, ?, ?, ?)",
    );
    const addRun = old.prepare(
      "INSERT INTO system_schedule_runs (slot_start, state, apply_id, reason, recorded_at) VALUES (?, ?, ?, ?, ?)",
    );
    const ids = new Map<string, number>();
    // An apply through the API first: it has no slot, before or after.
    const api = addApply.run({
      request_id: "by-api",
      at: slot(11),
      outcome: "succeeded",
      state: "completed",
      error: null,
      trigger: "api",
    });
    for (const c of cases) {
      let id: number | null = null;
      if (c.apply) {
        const outcome = { failed: "failed", interrupted: "interrupted", installing: "running" }[
          c.apply.state
        ];
        id = Number(
          addApply.run({
            request_id: `schedule:${c.slot}`,
            at: c.slot,
            outcome: outcome ?? "succeeded",
            state: c.apply.state,
            error: c.apply.error ? JSON.stringify(c.apply.error) : null,
            trigger: "schedule",
          }).lastInsertRowid,
        );
        for (const [seq, state] of c.apply.history.entries()) addState.run(id, seq, state, c.slot);
        ids.set(c.slot, id);
      }
      addRun.run(c.slot, c.run.state, id, c.run.reason ?? null, c.slot);
    }
    // The schedule as it was set just now, with windows that do not open while the test runs.
    old.prepare("INSERT INTO system_schedule (id, schedule, set_at) VALUES (1, ?, ?)").run(
      JSON.stringify({
        ...valid(),
        download_ahead_minutes: 0,
        random_delay_minutes: 0,
        callback_url: null,
      }),
      iso(Date.now()),
    );
    old.close();

    const { call } = await buildTestApp(t, ENV, { dataDir });
    const got = (await call({ method: "GET", url: "/v1/system/schedule" })).json();
    assert.deepEqual(
      got.runs,
      cases.map((c) => ({
        slot_start: c.slot,
        state: c.shown.state,
        ...(ids.has(c.slot) ? { apply_id: ids.get(c.slot) } : {}),
        ...(c.shown.reason === undefined ? {} : { reason: c.shown.reason }),
      })),
    );
    const history = (await call({ method: "GET", url: "/v1/system/apply-history" })).json().applies;
    assert.deepEqual(
      history.map((a: { id: number; trigger: string }) => [a.id, a.trigger]),
      [...[...ids.values()].reverse().map((id) => [id, "schedule"]), [Number(api.lastInsertRowid), "api"]],
      "every apply is still in the history, as it was",
    );
    // The first case's slot as recorded (slot(1) again would name another minute once one has passed).
    const statusAnswer = await call({
      method: "GET",
      url: `/v1/system/applies/${ids.get(cases[0]?.slot ?? "")}`,
    });
    const status = statusAnswer.json();
    assert.equal(statusAnswer.statusCode, 200, statusAnswer.body);
    assert.equal(status.state, "completed");
    assert.equal(status.trigger, "schedule");
    assert.equal("slot_start" in status, false, "the slot is not a field of the apply's answer");
  });
});
