import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chownSync,
  closeSync,
  constants,
  existsSync,
  lchownSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  renameSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import { capturedLogger } from "../helpers/logs.js";
import { accessLogSetup, cookieUpstream, write } from "./support.js";

/*
 * The access log folder is Caddy's user's (the packaged Caddy writes it as hostkeeper-caddy): what that
 * user can put there, planted by hand, must get a proxy:read token nothing of root's, and root must touch
 * nothing outside it.
 */

const CADDY = 65534;
const OTHER = 65533;
const ROUTE = "a.attack.test";

/** A root-only file of JSON lines, as a log that must not be read through the API. */
function rootOnly(t: TestContext, name: string): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-root-only-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, name);
  writeFileSync(path, '{"secret":"root-only line"}\n', { mode: 0o600 });
  return path;
}

/**
 * An agent whose access log folder is Caddy's user's, as the packaged one (`/var/lib/hostkeeper-caddy`, of
 * that user, holds `access-logs`), with a route that logs; and what the agent warns of.
 */
async function setup(t: TestContext) {
  const top = mkdtempSync(join(tmpdir(), "hk-caddy-state-"));
  t.after(() => rmSync(top, { recursive: true, force: true }));
  const state = join(top, "hostkeeper-caddy");
  const dir = join(state, "access-logs");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chownSync(state, CADDY, CADDY);
  chownSync(dir, CADDY, CADDY);
  const { log, lines } = capturedLogger("warn");
  const s = await accessLogSetup(t, { HOSTKEEPER_ACCESS_LOG_DIR: dir }, { logger: log });
  const port = await cookieUpstream(t);
  const payload = write(ROUTE, port, { access_log: true });
  const r = await s.call({ method: "POST", url: "/v1/proxy/routes", payload });
  assert.equal(r.statusCode, 201, r.body);
  return { ...s, dir, file: join(dir, `${ROUTE}.log`), warnings: lines };
}

const refused = (r: { status: number; body: unknown }, reason: RegExp) => {
  assert.equal(r.status, 500, JSON.stringify(r.body));
  const body = r.body as { code: string; detail: string };
  assert.equal(body.code, "unsafe_file");
  assert.match(body.detail, reason);
  assert.doesNotMatch(JSON.stringify(body), /root-only|\/tmp\//);
};

describe("planted in the access log folder", {
  skip: process.getuid?.() === 0 ? false : "needs root",
}, () => {
  test("a link at a route's log: the tail refuses it and reads nothing of its target; the log warns", async (t) => {
    const s = await setup(t);
    rmSync(s.file, { force: true });
    symlinkSync(rootOnly(t, "secret.log"), s.file);
    refused(await s.tail(ROUTE, "?lines=10"), /is a link/);
    assert.ok(
      s.warnings.some((l) => l.includes(`${ROUTE}.log`) && l.includes("is a link")),
      s.warnings.join("\n"),
    );
  });

  test("a FIFO as a route's log: the tail answers at once, and no thread of the agent waits on it", async (t) => {
    const s = await setup(t);
    rmSync(s.file, { force: true });
    execFileSync("mkfifo", ["-m", "600", s.file]);
    chownSync(s.file, CADDY, CADDY);
    const timeout = new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error("the tail of a FIFO did not answer within 10 s")), 10_000).unref(),
    );
    let answers: { status: number; body: unknown }[];
    try {
      // More tails than libuv has threads (4): none may be held.
      answers = await Promise.race([Promise.all([1, 2, 3, 4, 5].map(() => s.tail(ROUTE))), timeout]);
    } finally {
      // Without the fix each open waits for a writer: one opened now lets such a test end.
      try {
        closeSync(openSync(s.file, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // No reader waits (ENXIO): nothing held.
      }
    }
    for (const r of answers) refused(r, /is not a regular file/);
  });

  test("another user's file as a route's log is refused", async (t) => {
    const s = await setup(t);
    writeFileSync(s.file, '{"secret":"root-only other user"}\n');
    chownSync(s.file, OTHER, OTHER);
    refused(await s.tail(ROUTE), /belongs to uid 65533/);
  });

  test("a link at the folder: the sweep deletes nothing where it points, and the tail refuses", async (t) => {
    const s = await setup(t);
    // What Caddy's user would aim the folder at: a folder of root's with an old file named like a log.
    const victims = mkdtempSync(join(tmpdir(), "hk-victims-"));
    t.after(() => rmSync(victims, { recursive: true, force: true }));
    const archive = join(victims, "syslog-archive.log");
    writeFileSync(archive, "root's archive\n");
    const old = new Date(Date.now() - 30 * 86_400_000);
    utimesSync(archive, old, old);
    renameSync(s.dir, `${s.dir}.moved`);
    symlinkSync(victims, s.dir);
    lchownSync(s.dir, CADDY, CADDY);
    await s.app.services.accessLogs.sweep();
    assert.ok(existsSync(archive), "the file the link points at is still there");
    assert.ok(
      s.warnings.some((l) => l.includes("is a link")),
      s.warnings.join("\n"),
    );
    refused(await s.tail(ROUTE), /is a link/);
  });

  test("the sweep leaves links, FIFOs and other users' files named like logs alone, and says so", async (t) => {
    const s = await setup(t);
    const target = rootOnly(t, "old.log");
    const old = new Date(Date.now() - 30 * 86_400_000);
    utimesSync(target, old, old);
    symlinkSync(target, join(s.dir, "gone.attack.test.log"));
    execFileSync("mkfifo", [join(s.dir, "fifo.attack.test.log")]);
    const theirs = join(s.dir, "theirs.attack.test.log");
    writeFileSync(theirs, "");
    utimesSync(theirs, old, old);
    chownSync(theirs, OTHER, OTHER);
    mkdirSync(join(s.dir, "dir.attack.test.log"));
    await s.app.services.accessLogs.sweep();
    assert.ok(existsSync(target));
    assert.ok(existsSync(theirs));
    const warning = s.warnings.find((l) => l.includes("left alone"));
    assert.ok(warning, s.warnings.join("\n"));
    for (const name of ["gone.attack.test.log", "fifo.attack.test.log", "theirs.attack.test.log"])
      assert.ok(warning.includes(name), name);
  });

  test("a read of 10,000 long lines answers at most 2 MiB of them, newest last, and says it cut", async (t) => {
    const s = await setup(t);
    const lines = Array.from({ length: 10_000 }, (_, i) =>
      JSON.stringify({ i, uri: `/${"p".repeat(1000)}` }),
    );
    writeFileSync(s.file, `${lines.join("\n")}\n`);
    chownSync(s.file, CADDY, CADDY);
    const r = await s.call({ method: "GET", url: `/v1/proxy/routes/${ROUTE}/access-log?lines=10000` });
    assert.equal(r.statusCode, 200);
    assert.equal(r.headers["hostkeeper-truncated"], "true");
    assert.ok(r.rawPayload.length <= 2 * 1024 * 1024, `${r.rawPayload.length} bytes`);
    const got = r.json() as { i: number }[];
    assert.equal(got.at(-1)?.i, 9_999);
    assert.deepEqual(
      got.map((e) => e.i),
      Array.from({ length: got.length }, (_, k) => 10_000 - got.length + k),
    );
    const few = await s.call({ method: "GET", url: `/v1/proxy/routes/${ROUTE}/access-log?lines=5` });
    assert.equal(few.headers["hostkeeper-truncated"], undefined);
    assert.equal((few.json() as unknown[]).length, 5);
  });
});
