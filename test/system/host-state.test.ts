import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import { buildRpmRepo } from "../helpers/dnf-sandbox.js";
import { hostPackageState } from "../helpers/host-state.js";
import { exec } from "../helpers/processes.js";

// The check the apt and dnf tests end with, run on directories of its own: it must ignore what a reader of
// a package database rewrites and catch what a change of packages writes.

function scratch(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-hoststate-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

describe("the host-state check, on files", () => {
  const status = (t: TestContext) => {
    const dir = scratch(t);
    writeFileSync(join(dir, "status"), "Package: a\nVersion: 1.0\n");
    return dir;
  };

  test("a file whose times change and content does not is unchanged", (t) => {
    const dir = status(t);
    const before = hostPackageState([dir]);
    utimesSync(join(dir, "status"), new Date(), new Date(Date.now() + 60_000));
    utimesSync(dir, new Date(), new Date(Date.now() + 60_000));
    assert.deepEqual(hostPackageState([dir]), before);
  });

  test("a changed content is a change", (t) => {
    const dir = status(t);
    const before = hostPackageState([dir]);
    writeFileSync(join(dir, "status"), "Package: a\nVersion: 1.1\n");
    assert.notDeepEqual(hostPackageState([dir]), before);
  });

  test("a new entry is a change, even empty", (t) => {
    const dir = status(t);
    const before = hostPackageState([dir]);
    writeFileSync(join(dir, "lock"), "");
    assert.notDeepEqual(hostPackageState([dir]), before);
  });

  test("a removed entry is a change", (t) => {
    const dir = status(t);
    mkdirSync(join(dir, "info"));
    writeFileSync(join(dir, "info", "a.list"), "/usr/share/doc/a\n");
    const before = hostPackageState([dir]);
    rmSync(join(dir, "info", "a.list"));
    assert.notDeepEqual(hostPackageState([dir]), before);
  });

  test("a SQLite WAL index (-shm) appearing or being rewritten is not a change", (t) => {
    const dir = status(t);
    const before = hostPackageState([dir]);
    writeFileSync(join(dir, "rpmdb.sqlite-shm"), "read marks 1");
    assert.deepEqual(hostPackageState([dir]), before);
    writeFileSync(join(dir, "rpmdb.sqlite-shm"), "read marks 2");
    assert.deepEqual(hostPackageState([dir]), before);
  });

  test("dnf's per-run line in dnf.rpm.log is not a change; a transaction line is", (t) => {
    const dir = scratch(t);
    const log = join(dir, "dnf.rpm.log");
    writeFileSync(log, "2024-01-01T00:00:00+0000 INFO --- logging initialized ---\n");
    const before = hostPackageState([log]);
    writeFileSync(
      log,
      "2024-01-01T00:00:00+0000 INFO --- logging initialized ---\n2024-01-02T00:00:00+0000 INFO --- logging initialized ---\n",
    );
    assert.deepEqual(hostPackageState([log]), before);
    writeFileSync(
      log,
      "2024-01-01T00:00:00+0000 INFO --- logging initialized ---\n2024-01-02T00:00:00+0000 SUBDEBUG Installed: a-1.0-1.noarch\n",
    );
    assert.notDeepEqual(hostPackageState([log]), before);
  });
});

describe("the host-state check, on a real rpm database of its own (rpm --dbpath)", () => {
  async function rpmdb(t: TestContext) {
    const dbpath = join(scratch(t), "rpmdb");
    const rpm = (args: readonly string[]) => exec("rpm", [`--dbpath=${dbpath}`, "--noplugins", ...args]);
    await rpm(["--initdb"]);
    return { dbpath, rpm };
  }

  test("an rpm query (which rewrites rpmdb.sqlite-shm) is not a change", async (t) => {
    const { dbpath, rpm } = await rpmdb(t);
    const before = hostPackageState([dbpath]);
    await rpm(["-qa"]);
    assert.deepEqual(hostPackageState([dbpath]), before);
  });

  test("an rpm install is a change of rpmdb.sqlite", async (t) => {
    const { dbpath, rpm } = await rpmdb(t);
    const repo = await buildRpmRepo(t, [{ name: "hkstate", version: "1.0" }], []);
    const before = hostPackageState([dbpath]);
    // --justdb: the package is recorded in this database only; no file is written anywhere else.
    await rpm(["-i", "--justdb", "--nodeps", "--noscripts", join(repo, "hkstate-1.0-1.noarch.rpm")]);
    const after = hostPackageState([dbpath]);
    assert.notEqual(after[join(dbpath, "rpmdb.sqlite")], before[join(dbpath, "rpmdb.sqlite")]);
  });
});
