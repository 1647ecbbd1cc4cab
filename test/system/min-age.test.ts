import assert from "node:assert/strict";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { before, test } from "node:test";
import { buildTestApp } from "../helpers/app.js";
import {
  type AptRepo,
  aptAgentEnv,
  buildAptRepo,
  createAptSandbox,
  type DebSpec,
  debianArch,
} from "../helpers/apt-sandbox.js";
import { buildRpmRepo, createDnfRoot, dnfAgentEnv, type RpmSpec } from "../helpers/dnf-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";

// Taken first: the host's package state, compared at the end.
const hostBefore = hostPackageState();

const DAY = 86_400_000;

/**
 * agec 1.1, a security fix, is offered from the first check on; from the second, agea 1.1, a security
 * update that needs ageb 1.1, a regular update offered with it.
 */
const BASE: DebSpec[] = [
  ...["agea", "ageb", "agec"].map((name): DebSpec => ({ name, version: "1.0", suites: ["bookworm"] })),
  { name: "agec", version: "1.1", suites: ["bookworm-security"] },
];
const LATER: DebSpec[] = [
  ...BASE,
  { name: "agea", version: "1.1", suites: ["bookworm-security"], depends: "ageb (>= 1.1)" },
  { name: "ageb", version: "1.1", suites: ["bookworm-updates"] },
];

let first: AptRepo;
let later: AptRepo;
before(async () => {
  [first, later] = await Promise.all([
    buildAptRepo({ after: () => {} }, BASE, debianArch()),
    buildAptRepo({ after: () => {} }, LATER, debianArch()),
  ]);
});
test.after(() => {
  for (const r of [first, later]) rmSync(r.dir, { recursive: true, force: true });
});

type Checked = { checked_at: string; updates: { name: string; first_seen_at: string }[] };
type Applied = {
  upgraded: { name: string }[];
  held_back: { name: string; reason: string; eligible_at?: string }[];
};

test("minimum age: a version offered today waits while an older security fix applies, and an eligible update that needs it waits with it", async (t) => {
  const sandbox = await createAptSandbox(t, first, { install: ["agea=1.0", "ageb=1.0", "agec=1.0"] });
  let offset = 0;
  const { call } = await buildTestApp(t, aptAgentEnv(sandbox), { now: () => Date.now() + offset });
  const check = async () => {
    const r = await call({ method: "POST", url: "/v1/system/check-updates" });
    assert.equal(r.statusCode, 200, r.body);
    return r.json() as Checked;
  };
  const one = await check();
  await new Promise((r) => setTimeout(r, 1500));
  // The repository now offers agea 1.1 and ageb 1.1 too: first seen by the second check.
  writeFileSync(join(sandbox.root, "etc/apt/sources.list"), later.sourcesList);
  const two = await check();
  const seen = Object.fromEntries(two.updates.map((u) => [u.name, u.first_seen_at]));
  assert.deepEqual(seen, { agea: two.checked_at, ageb: two.checked_at, agec: one.checked_at });
  // A check asked for the same minimum says which update would wait, and until when.
  const asked = await call({ method: "POST", url: "/v1/system/check-updates?min_age_days=3" });
  assert.equal(asked.statusCode, 200, asked.body);
  const askedUpdates = (
    asked.json() as { updates: { name: string; eligible_at?: string; held_reason: string | null }[] }
  ).updates;
  const waits = askedUpdates.map((u) => [u.name, u.eligible_at ?? null]);
  // agea, a security update, needs ageb 1.1 from the regular suite: a security apply keeps it back anyway.
  assert.deepEqual(Object.fromEntries(askedUpdates.map((u) => [u.name, u.held_reason])), {
    agea: "kept_back",
    ageb: "deferred",
    agec: null,
  });
  assert.deepEqual(Object.fromEntries(waits), {
    agea: null,
    ageb: new Date(Date.parse(two.checked_at) + 3 * DAY).toISOString(),
    agec: null,
  });

  // Three days on, less a minute (the apply checks again first), from the second check: ageb is not old enough for a regular update's
  // three days; agea, a security update, has no minimum but needs ageb 1.1.
  const eligible = Date.parse(two.checked_at) + 3 * DAY;
  offset = eligible - 60_000 - Date.now();
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", min_age_days: 3, security_min_age_days: 0 },
  });
  assert.equal(r.statusCode, 200, r.body);
  const applied = r.json() as Applied;
  assert.deepEqual(
    applied.upgraded.map((u) => u.name),
    ["agec"],
    "the security fix applies",
  );
  const held = Object.fromEntries(applied.held_back.map((h) => [h.name, h]));
  assert.deepEqual(held.ageb, {
    name: "ageb",
    arch: "all",
    current_version: "1.0",
    available_version: "1.1",
    reason: "deferred",
    eligible_at: new Date(eligible).toISOString(),
  });
  assert.equal(held.agea?.reason, "kept_back", "agea needs ageb 1.1: it waits with it, and nothing breaks");
  assert.deepEqual(await sandbox.installed(), { agea: "1.0", ageb: "1.0", agec: "1.1" });

  // Once ageb is old enough both go.
  offset = eligible + 1000 - Date.now();
  const again = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", min_age_days: 3, security_min_age_days: 0 },
  });
  assert.equal(again.statusCode, 200, again.body);
  assert.deepEqual(await sandbox.installed(), { agea: "1.1", ageb: "1.1", agec: "1.1" });
  assert.deepEqual(hostPackageState(), hostBefore, "the host's own packages are untouched");
});

test("with applies alone (no check between them), a version first offered at an apply ages from then, and goes once old enough", async (t) => {
  const sandbox = await createAptSandbox(t, later, { install: ["agea=1.0", "ageb=1.0", "agec=1.0"] });
  let offset = 0;
  const { call } = await buildTestApp(t, aptAgentEnv(sandbox), { now: () => Date.now() + offset });
  const apply = async () => {
    const r = await call({
      method: "POST",
      url: "/v1/system/apply-updates",
      payload: { update_type: "full", min_age_days: 2, security_min_age_days: 2 },
    });
    assert.equal(r.statusCode, 200, r.body);
    return r.json() as Applied;
  };
  const first = await apply();
  assert.deepEqual(first.upgraded, []);
  const eligible = first.held_back.find((h) => h.name === "ageb")?.eligible_at;
  assert.ok(eligible, JSON.stringify(first.held_back));
  // A day on: still too young, and still eligible at the same time (its first sighting was kept).
  offset = DAY;
  const second = await apply();
  assert.deepEqual(second.upgraded, []);
  assert.equal(second.held_back.find((h) => h.name === "ageb")?.eligible_at, eligible);
  offset = Date.parse(eligible) + 1000 - Date.now();
  const third = await apply();
  assert.deepEqual(third.upgraded.map((u) => u.name).sort(), ["agea", "ageb", "agec"]);
});

test("dnf: the same, an eligible security update waiting with the regular one it needs", async (t) => {
  const release: RpmSpec = { name: "hk-release", version: "9", provides: "system-release(releasever) = 9" };
  const base: RpmSpec[] = [
    release,
    ...["agea", "ageb", "agec"].map((name) => ({ name, version: "1.0" })),
    { name: "agec", version: "1.1" },
  ];
  const fix = {
    id: "HK-SA-2024:0101",
    type: "security" as const,
    packages: [{ name: "agec", version: "1.1" }],
  };
  const firstRepo = await buildRpmRepo(t, base, [fix]);
  const laterRepo = await buildRpmRepo(
    t,
    [...base, { name: "agea", version: "1.1", requires: "ageb >= 1.1" }, { name: "ageb", version: "1.1" }],
    [fix, { id: "HK-SA-2024:0102", type: "security", packages: [{ name: "agea", version: "1.1" }] }],
  );
  const root = await createDnfRoot(t, firstRepo, ["hk-release", "agea-1.0", "ageb-1.0", "agec-1.0"]);
  let offset = 0;
  const { call } = await buildTestApp(t, dnfAgentEnv(root), { now: () => Date.now() + offset });
  const check = async () =>
    (await call({ method: "POST", url: "/v1/system/check-updates" })).json() as Checked;
  await check();
  await new Promise((r) => setTimeout(r, 1500));
  writeFileSync(
    join(root.root, "etc/yum.repos.d/test.repo"),
    `[test]\nname=test\nbaseurl=file://${laterRepo}\ngpgcheck=0\nenabled=1\nmetadata_expire=0\n`,
  );
  const two = await check();
  const eligible = Date.parse(two.checked_at) + 3 * DAY;
  offset = eligible - 60_000 - Date.now();
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", min_age_days: 3 },
  });
  assert.equal(r.statusCode, 200, r.body);
  const applied = r.json() as Applied;
  assert.deepEqual(
    applied.upgraded.map((u) => u.name),
    ["agec"],
  );
  const held = Object.fromEntries(applied.held_back.map((h) => [h.name, h]));
  assert.deepEqual(
    [held.ageb?.reason, held.ageb?.eligible_at],
    ["deferred", new Date(eligible).toISOString()],
  );
  assert.equal(held.agea?.reason, "kept_back");
  const installed = await root.installed();
  assert.deepEqual(
    [installed.agea, installed.ageb, installed.agec].map((v) => v?.split("-")[0]),
    ["1.0", "1.0", "1.1"],
  );
  assert.deepEqual(hostPackageState(), hostBefore, "the host's own packages are untouched");
});
