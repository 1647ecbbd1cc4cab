import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { buildTestApp, TEST_SECRET } from "../helpers/app.js";
import { buildRpmRepo, createDnfRoot, type RpmSpec } from "../helpers/dnf-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";
import { serveDirectory, startReceiver, verifyStandardWebhook } from "../helpers/http.js";
import { waitFor } from "../helpers/wait.js";

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

/** labsec: a security update; labreg: a regular one. */
const RPMS: RpmSpec[] = [
  { name: "hk-release", version: "9", provides: "system-release(releasever) = 9" },
  { name: "labsec", version: "1.0" },
  { name: "labreg", version: "1.0" },
  { name: "labsec", version: "1.1" },
  { name: "labreg", version: "1.1" },
];

const MINUTE = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();

test("dnf: a window opening a moment from now on the agent's clock applies its updates once but those its exclude keeps out, as a scheduled apply with signed callbacks", async (t) => {
  const repo = await buildRpmRepo(t, RPMS, [
    { id: "HK-SA-2024:0001", type: "security", packages: [{ name: "labsec", version: "1.1" }] },
  ]);
  const root = await createDnfRoot(t, repo, ["hk-release", "labsec-1.0", "labreg-1.0"]);
  const mirror = await serveDirectory(t, repo);
  writeFileSync(
    join(root.root, "etc/yum.repos.d/test.repo"),
    `[test]\nname=test\nbaseurl=${mirror.url}/\ngpgcheck=0\nenabled=1\nmetadata_expire=0\n`,
  );
  const dir = mkdtempSync(join(tmpdir(), "hk-dnf-schedule-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "boot_id"), "44444444-4444-4444-8444-444444444444\n");
  writeFileSync(join(dir, "osrelease"), "5.14.0-362.el9.x86_64\n");
  let offset = 0;
  const { call } = await buildTestApp(
    t,
    {
      HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
      HOSTKEEPER_PACKAGE_MANAGER: "dnf",
      HOSTKEEPER_DNF_INSTALLROOT: root.root,
      HOSTKEEPER_REBOOT_COMMAND: "/bin/false",
      HOSTKEEPER_BOOT_ID_FILE: join(dir, "boot_id"),
      HOSTKEEPER_KERNEL_RELEASE_FILE: join(dir, "osrelease"),
    },
    { now: () => Date.now() + offset },
  );
  const receiver = await startReceiver(t);
  // The agent's clock now reads two seconds before a window of every day opens.
  const opens = Math.floor(Date.now() / MINUTE) * MINUTE + 2 * MINUTE;
  offset = opens - 2000 - Date.now();
  const put = await call({
    method: "PUT",
    url: "/v1/system/schedule",
    payload: {
      windows: [
        {
          days: ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
          start: iso(opens).slice(11, 16),
          duration_minutes: 5,
        },
      ],
      timezone: "UTC",
      update_type: "full",
      reboot: "if_required",
      callback_url: receiver.url,
      exclude: ["labr*"],
    },
  });
  assert.equal(put.statusCode, 200, put.body);
  assert.deepEqual(put.json().exclude, ["labr*"]);
  assert.equal(put.json().next_run_at, iso(opens));

  const s = await waitFor(
    "the slot's run to end",
    async () => {
      const r = (await call({ method: "GET", url: "/v1/system/schedule" })).json();
      return r.runs[0] && r.runs[0].state !== "running" ? r : undefined;
    },
    60_000,
  );
  const [run] = s.runs;
  assert.equal(run.state, "completed", JSON.stringify(run));
  assert.equal(run.slot_start, iso(opens));
  assert.equal(s.next_run_at, iso(opens + 86_400_000));
  const status = (await call({ method: "GET", url: `/v1/system/applies/${run.apply_id}` })).json();
  assert.equal(status.trigger, "schedule");
  assert.equal(status.package_manager, "dnf");
  assert.ok(Date.parse(status.started_at) + offset >= opens, "not before the window opened");
  assert.deepEqual(
    status.upgraded.map((p: { name: string }) => p.name),
    ["labsec"],
  );
  assert.equal((await root.installed()).labreg, "1.0-1", "kept out by the schedule's exclude");
  assert.deepEqual(
    status.held_back.map((p: { name: string; reason: string }) => [p.name, p.reason]),
    [["labreg", "excluded"]],
  );

  await receiver.waitFor(4, 15_000);
  assert.deepEqual(
    receiver.received.map((w) => w.json.data.state),
    ["queued", "downloading", "installing", "completed"],
  );
  for (const w of receiver.received) {
    assert.equal(w.json.data.trigger, "schedule");
    assert.ok(verifyStandardWebhook(TEST_SECRET, w), "signed");
  }
  const { applies } = (await call({ method: "GET", url: "/v1/system/apply-history" })).json();
  assert.equal(applies.length, 1, "applied once");
});

test("the host's own package state is untouched", () => {
  assert.deepEqual(hostPackageState(), hostBefore);
});
