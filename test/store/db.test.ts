import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { DB_CACHE_KIB, openDatabase } from "../../src/store/db.js";

test("the database keeps at most DB_CACHE_KIB of its pages in memory, on every open", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-db-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  for (let open = 0; open < 2; open++) {
    const db = openDatabase(dir, [{ name: "test.001", sql: "CREATE TABLE t (x INTEGER)" }]);
    try {
      // Negative: a size in KiB, not in pages; better-sqlite3's own build would say -16000.
      assert.equal(db.pragma("cache_size", { simple: true }), -DB_CACHE_KIB);
      assert.equal(db.pragma("journal_mode", { simple: true }), "wal");
    } finally {
      db.close();
    }
  }
});
