import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { before, type TestContext, test } from "node:test";
import { excludedBy } from "../../src/system/packages/exclude.js";
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

// Taken first: the host's package state, compared by the last test.
const hostBefore = hostPackageState();

type HeldBack = { name: string; reason: string };
type Applied = { upgraded: { name: string }[]; held_back: HeldBack[] };

test("exclude patterns are shell globs matched against whole package names", () => {
  const m = excludedBy(["lib*-dev", "exa?t", "ke[rn]nel", "neg[!x]y", "a.b+c"]);
  for (const name of ["libfoo-dev", "lib-dev", "exact", "kernel", "kennel", "negay", "a.b+c"])
    assert.ok(m(name), name);
  for (const name of ["libfoo-dev2", "xlibfoo-dev", "exacts", "kxrnel", "negxy", "aXb+c", "a.bbc"])
    assert.ok(!m(name), name);
  assert.equal(excludedBy([])("anything"), false);
});

test("apply-updates refuses a pattern apt or dnf would read otherwise, naming it", async (t) => {
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
    HOSTKEEPER_PACKAGE_MANAGER: "apt",
  });
  for (const bad of ["/regex/", "a b", "", "x\ny", "name:amd64", "../etc"]) {
    const r = await call({
      method: "POST",
      url: "/v1/system/apply-updates",
      payload: { update_type: "full", exclude: [bad] },
    });
    assert.equal(r.statusCode, 400, `${JSON.stringify(bad)}: ${r.body}`);
    assert.ok(
      r.json().errors.some((e: { field: string }) => e.field === "body.exclude[0]"),
      r.body,
    );
  }
  const many = Array.from({ length: 65 }, (_, i) => `p${i}`);
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", exclude: many },
  });
  assert.equal(r.statusCode, 400, r.body);
});

const DEBS: DebSpec[] = [
  ...["exone", "extwo-dev", "exthree"].map(
    (name): DebSpec => ({ name, version: "1.0", suites: ["bookworm"] }),
  ),
  ...["exone", "extwo-dev", "exthree"].map(
    (name): DebSpec => ({ name, version: "1.1", suites: ["bookworm-updates"] }),
  ),
];

let repo: AptRepo;
before(async () => {
  repo = await buildAptRepo({ after: () => {} }, DEBS, debianArch());
});
test.after(() => rmSync(repo.dir, { recursive: true, force: true }));

async function aptApply(t: TestContext, exclude: string[]) {
  const sandbox = await createAptSandbox(t, repo, { install: ["exone=1.0", "extwo-dev=1.0", "exthree=1.0"] });
  const { call } = await buildTestApp(t, aptAgentEnv(sandbox));
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", exclude },
  });
  assert.equal(r.statusCode, 200, r.body);
  return { result: r.json() as Applied, installed: await sandbox.installed() };
}

test("apt: an apply keeps out the packages its exclude names, and says so in held_back", async (t) => {
  const { result, installed } = await aptApply(t, ["*-dev", "exthree"]);
  assert.deepEqual([installed.exone, installed["extwo-dev"], installed.exthree], ["1.1", "1.0", "1.0"]);
  assert.deepEqual(
    result.upgraded.map((u) => u.name),
    ["exone"],
  );
  assert.deepEqual(result.held_back.map((h) => [h.name, h.reason]).sort(), [
    ["exthree", "excluded"],
    ["extwo-dev", "excluded"],
  ]);
});

test("dnf: an apply keeps out the packages its exclude names, and says so in held_back", async (t) => {
  const rpms: RpmSpec[] = [
    { name: "hk-release", version: "9", provides: "system-release(releasever) = 9" },
    ...["exone", "extwo-dev"].flatMap((name) => [
      { name, version: "1.0" },
      { name, version: "1.1" },
    ]),
  ];
  const rpmRepo = await buildRpmRepo(t, rpms, []);
  const root = await createDnfRoot(t, rpmRepo, ["hk-release", "exone-1.0", "extwo-dev-1.0"]);
  const { call } = await buildTestApp(t, dnfAgentEnv(root));
  const r = await call({
    method: "POST",
    url: "/v1/system/apply-updates",
    payload: { update_type: "full", exclude: ["*-dev"] },
  });
  assert.equal(r.statusCode, 200, r.body);
  const result = r.json() as Applied;
  const installed = await root.installed();
  assert.match(installed.exone ?? "", /^1\.1-/);
  assert.match(installed["extwo-dev"] ?? "", /^1\.0-/);
  assert.deepEqual(
    result.held_back.map((h) => [h.name, h.reason]),
    [["extwo-dev", "excluded"]],
  );
  assert.deepEqual(hostPackageState(), hostBefore, "the host's own packages are untouched");
});
