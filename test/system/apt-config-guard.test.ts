import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { test } from "node:test";
import { loadConfig } from "../../src/settings.js";
import { buildTestApp } from "../helpers/app.js";
import { guardAptConfig } from "../helpers/apt-guard.js";
import { hostPackageState } from "../helpers/host-state.js";

// apt reads the host's own configuration when the file APT_CONFIG names is missing, and then changes this
// host's packages: a missing file must stop the agent, never hand it the host.

test("a HOSTKEEPER_APT_CONFIG that does not exist is a configuration error", () => {
  assert.throws(
    () =>
      loadConfig({
        env: { HOSTKEEPER_TOKEN: "t".repeat(24), HOSTKEEPER_APT_CONFIG: "/nonexistent/apt.conf" },
      }),
    /HOSTKEEPER_APT_CONFIG.*\/nonexistent\/apt\.conf, which does not exist: apt would read the host's own configuration/s,
  );
});

test("an APT_CONFIG file removed after the start stops every apt command before it runs", async (t) => {
  const conf = guardAptConfig(t);
  const { call } = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
    HOSTKEEPER_PACKAGE_MANAGER: "apt",
    HOSTKEEPER_APT_CONFIG: conf,
  });
  const before = hostPackageState();
  rmSync(conf);
  for (const [method, url, payload] of [
    ["POST", "/v1/system/check-updates", undefined],
    ["POST", "/v1/system/apply-updates", { update_type: "full" }],
  ] as const) {
    const res = await call({ method, url, ...(payload ? { payload } : {}) });
    assert.equal(res.statusCode, 500, res.body);
    assert.equal(res.json().code, "package_manager_failed");
    assert.match(
      res.json().detail,
      /APT_CONFIG file .* is missing, and apt would manage this host's packages/,
    );
  }
  assert.deepEqual(hostPackageState(), before);
});
