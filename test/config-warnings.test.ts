import assert from "node:assert/strict";
import { test } from "node:test";
import {
  editDistance,
  type Privileges,
  rootlessFailures,
  unknownEnvWarnings,
} from "../src/config-warnings.js";
import { callerRequestId } from "../src/http/request-id.js";
import { allSettings, loadConfig } from "../src/settings.js";
import { guardAptConfig } from "./helpers/apt-guard.js";

const user: Privileges = { uid: 1000, canBindLowPorts: false, unprivilegedPortStart: 1024 };

test("edit distance counts insertions, deletions and substitutions", () => {
  assert.equal(editDistance("", "abc"), 3);
  assert.equal(editDistance("kitten", "sitting"), 3);
  assert.equal(editDistance("HOSTKEEPER_LISTEN", "HOSTKEEPER_LISTEN"), 0);
});

test("an unknown HOSTKEEPER_* variable names the closest known one; known ones and other prefixes are quiet", () => {
  const warnings = unknownEnvWarnings(
    {
      HOSTKEEPER_DATADIR: "/x",
      HOSTKEEPER_CADDY_LISTENS: ":80",
      HOSTKEEPER_LISTEN: "127.0.0.1:1",
      HOSTKEEPER_CONFIG: "/etc/x.json",
      PATH: "/bin",
      HOSTKEEPERLISTEN: "not our prefix",
    },
    allSettings(),
  );
  assert.deepEqual(warnings, [
    "unknown environment variable HOSTKEEPER_CADDY_LISTENS is ignored; did you mean HOSTKEEPER_CADDY_LISTEN?",
    "unknown environment variable HOSTKEEPER_DATADIR is ignored; did you mean HOSTKEEPER_DATA_DIR?",
  ]);
});

test("as root nothing is said; without root each feature that needs it is named", () => {
  const config = loadConfig({ env: {} });
  assert.deepEqual(rootlessFailures(config, { ...user, uid: 0 }), []);
  const failing = rootlessFailures(config, user);
  assert.deepEqual(failing, [
    "the embedded Caddy listening on :80, :443 (HOSTKEEPER_CADDY_LISTEN)",
    "check-updates and apply-updates (apt-get and dnf change the host's package state, which needs root)",
    "auto_reboot (the reboot command systemctl reboot needs root)",
  ]);
});

test("without root: low ports of the API and operator slots; CAP_NET_BIND_SERVICE, a lowered port start and sandboxes count", (t) => {
  const config = loadConfig({
    env: {
      HOSTKEEPER_LISTEN: "127.0.0.1:626",
      HOSTKEEPER_OPERATOR_PORTS: "701,7102",
      HOSTKEEPER_CADDY_LISTEN: "127.0.0.1:8080",
      HOSTKEEPER_PACKAGE_MANAGER: "apt",
      // A sandbox's configuration, which must exist (a missing one would be the host's).
      HOSTKEEPER_APT_CONFIG: guardAptConfig(t),
    },
  });
  assert.deepEqual(rootlessFailures(config, user), [
    "the API on port 626 (HOSTKEEPER_LISTEN)",
    "operator slots on blue 701 (HOSTKEEPER_OPERATOR_PORTS)",
    "auto_reboot (the reboot command systemctl reboot needs root)",
  ]);
  const withCap = rootlessFailures(config, { ...user, canBindLowPorts: true });
  assert.deepEqual(withCap, ["auto_reboot (the reboot command systemctl reboot needs root)"]);
  assert.deepEqual(rootlessFailures(config, { ...user, unprivilegedPortStart: 0 }), withCap);
  // With another's Caddy the agent binds no Caddy address itself.
  const external = loadConfig({ env: { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:2019" } });
  assert.ok(!rootlessFailures(external, user).some((f) => f.includes("HOSTKEEPER_CADDY_LISTEN")));
});

test("a caller's request id is kept only when short and of the safe characters", () => {
  for (const ok of ["abc-123", "01HZX3J9K8", "svc:1234/5", "a.b_c+d=e@f", "x".repeat(128)])
    assert.equal(callerRequestId(ok), ok);
  for (const bad of [undefined, "", "x".repeat(129), "a b", 'q"', "new\nline", "semi;colon", ["a", "b"]])
    assert.equal(callerRequestId(bad), undefined, String(bad));
});
