import assert from "node:assert/strict";
import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { lastLines, routeIdOfFile, TAIL_MAX_BYTES, tailLines } from "../../src/access-logs/files.js";
import { accessLogFile, accessLoggerName } from "../../src/caddy/access-log-json.js";

/* The files' side of the access logs, without Caddy: reading the newest lines backwards, and file names. */

const tempDir = (t: { after: (fn: () => unknown) => void }) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-tail-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
};

describe("the newest lines of a file, read backwards", () => {
  test("lines of every length across the 64 KiB chunks: the last n, oldest first", async (t) => {
    const file = join(tempDir(t), "a.log");
    // Lengths from 0 to 200 KiB, so lines start, end and span chunk borders everywhere.
    const lines = Array.from(
      { length: 400 },
      (_, i) => `${i}:${"x".repeat((i * 7919) % (i % 50 === 0 ? 200_000 : 3000))}`,
    );
    writeFileSync(file, `${lines.join("\n")}\n`);
    for (const n of [1, 2, 3, 57, 399, 400])
      assert.deepEqual(await lastLines(file, n), lines.slice(-n), `n=${n}`);
    assert.deepEqual(await lastLines(file, 10_000), lines);
  });

  test("a last line without its newline is not a line yet; no file, or an empty one, has none", async (t) => {
    const dir = tempDir(t);
    const file = join(dir, "b.log");
    writeFileSync(file, "");
    assert.deepEqual(await lastLines(file, 5), []);
    appendFileSync(file, "one\ntwo\nthr");
    assert.deepEqual(await lastLines(file, 5), ["one", "two"]);
    assert.deepEqual(await lastLines(file, 1), ["two"]);
    appendFileSync(file, "ee\n");
    assert.deepEqual(await lastLines(file, 1), ["three"]);
    assert.deepEqual(await lastLines(join(dir, "none.log"), 5), []);
  });
});

describe("what one read of the newest lines takes", () => {
  test("at most the file's last TAIL_MAX_BYTES, whatever the count asked, and it says when it cut", async (t) => {
    const file = join(tempDir(t), "big.log");
    // 3 MiB of 1 KiB lines: 10,000 asked, about 2,000 fit.
    const line = (i: number) => `{"i":${i},"pad":"${"x".repeat(1000)}"}`;
    const lines = Array.from({ length: 3000 }, (_, i) => line(i));
    writeFileSync(file, `${lines.join("\n")}\n`);
    const tail = await tailLines(file, 10_000);
    assert.equal(tail.cut, true);
    const bytes = tail.lines.reduce((sum, l) => sum + Buffer.byteLength(l) + 1, 0);
    assert.ok(bytes <= TAIL_MAX_BYTES, `${bytes} bytes`);
    assert.ok(tail.lines.length > 1900, `${tail.lines.length} lines`);
    assert.deepEqual(tail.lines, lines.slice(-tail.lines.length));
    // What fits is not cut; neither is a whole file read.
    assert.deepEqual(await tailLines(file, 100), { lines: lines.slice(-100), cut: false });
    assert.deepEqual(await tailLines(file, 10_000, 4 * 1024 * 1024), { lines, cut: false });
    // A newest line longer than the limit: no line, and cut.
    writeFileSync(file, `${"y".repeat(200)}\n`);
    assert.deepEqual(await tailLines(file, 5, 100), { lines: [], cut: true });
  });
});

test("a route's file names the route; rolled files and wildcards name it too, other files none", () => {
  assert.equal(accessLogFile("/d", "app.example.com"), "/d/app.example.com.log");
  assert.equal(accessLogFile("/d", "*.example.com"), "/d/%2A.example.com.log");
  assert.equal(routeIdOfFile("app.example.com.log"), "app.example.com");
  assert.equal(routeIdOfFile("%2A.example.com.log"), "*.example.com");
  assert.equal(routeIdOfFile("app.example.com-2026-11-26T01-02-03.456.log.gz"), "app.example.com");
  assert.equal(routeIdOfFile("app-2026.example.com.log"), "app-2026.example.com");
  for (const other of ["notes.txt", "app.example.com.log.tmp", ".log"])
    assert.equal(routeIdOfFile(other), undefined, other);
  // Logger names hold no dot: a log's include takes a name and every name below it.
  assert.match(accessLoggerName("a.example.com"), /^hostkeeper_access_[0-9a-f]{16}$/);
  assert.notEqual(accessLoggerName("a.example.com"), accessLoggerName("b.example.com"));
});
