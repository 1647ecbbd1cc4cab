import assert from "node:assert/strict";
import { test } from "node:test";
import { problemBody } from "../../src/http/errors.js";
import { ApplyFailedError, CommandError, PackageManagerBusyError } from "../../src/system/errors.js";
import { systemProblem } from "../../src/system/problems.js";

const body = (err: unknown) => {
  const p = systemProblem(err);
  assert.ok(p, "mapped");
  return problemBody(p);
};

test("a failed command is package_manager_failed with its command, exit and error lines", () => {
  const p = body(
    new CommandError("apt-get update failed (exit 100): E: x", {
      command: "apt-get update",
      exitCode: 100,
      lines: ["E: x"],
    }),
  );
  assert.equal(p.status, 500);
  assert.equal(p.code, "package_manager_failed");
  assert.equal(p.detail, "apt-get update failed (exit 100): E: x");
  assert.deepEqual([p.command, p.exit_code, p.manager_errors], ["apt-get update", 100, ["E: x"]]);
});

test("a command that never ran says so without exit details", () => {
  const p = body(new CommandError("dnf is not installed on this host", { command: "dnf" }));
  assert.equal(p.code, "package_manager_failed");
  assert.equal("exit_code" in p, false);
});

test("a held lock is package_manager_busy naming the holder", () => {
  const p = body(
    new PackageManagerBusyError({ pid: 42, name: "unattended-upgr", lock: "/var/lib/dpkg/lock" }, 3000),
  );
  assert.equal(p.code, "package_manager_busy");
  assert.deepEqual(p.lock_holder, { pid: 42, name: "unattended-upgr", lock: "/var/lib/dpkg/lock" });
  assert.match(p.detail, /held by process 42 \(unattended-upgr\); gave up after waiting 3 s/);
});

test("a failed apply carries its history id; other errors are not the system area's", () => {
  const p = body(new ApplyFailedError(7, new CommandError("x failed", { command: "x", exitCode: 1 })));
  assert.equal(p.apply_id, 7);
  assert.equal(p.code, "package_manager_failed");
  assert.equal(systemProblem(new ApplyFailedError(7, new Error("bug"))), undefined);
  assert.equal(systemProblem(new Error("other")), undefined);
});
