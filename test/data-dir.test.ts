import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { projectRoot } from "../src/paths.js";
import { freePort } from "../support/loopback.js";
import { cannotRunAs } from "./helpers/users.js";

const NOBODY = 65534;

/**
 * `hostkeeper serve` with a data dir it cannot use: it must stop before anything starts (no Caddy, since
 * HOSTKEEPER_CADDY_ADMIN points at nothing), with one line.
 */
async function serve(dataDir: string, opts: { uid?: number } = {}) {
  const root = mkdtempSync(join(tmpdir(), "hk-datadir-cfg-"));
  chmodSync(root, 0o755);
  const config = join(root, "config.json");
  writeFileSync(config, "{}", { mode: 0o644 });
  try {
    return spawnSync(process.execPath, [join(projectRoot(), "dist/src/cli/main.js"), "serve"], {
      env: {
        PATH: process.env.PATH,
        HOSTKEEPER_CONFIG: config,
        HOSTKEEPER_DATA_DIR: dataDir,
        HOSTKEEPER_LISTEN: `127.0.0.1:${await freePort()}`,
        HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9",
      },
      encoding: "utf8",
      timeout: 20_000,
      ...(opts.uid === undefined ? {} : { uid: opts.uid, gid: opts.uid }),
    });
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const tempDir = (t: { after: (fn: () => unknown) => void }) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-datadir-"));
  chmodSync(dir, 0o755);
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
};

describe("a data dir the agent cannot use stops the start with one line naming HOSTKEEPER_DATA_DIR and the path", () => {
  test("missing, and impossible to create", async (t) => {
    const file = join(tempDir(t), "a-file");
    writeFileSync(file, "");
    const path = join(file, "data");
    const r = await serve(path);
    assert.equal(r.status, 1, r.stderr);
    assert.equal(
      r.stderr,
      `hostkeeper: the data dir ${path} (HOSTKEEPER_DATA_DIR) is missing and cannot be created: ENOTDIR\n`,
    );
  });

  test("not a directory", async (t) => {
    const file = join(tempDir(t), "a-file");
    writeFileSync(file, "");
    const r = await serve(file);
    assert.equal(r.status, 1, r.stderr);
    assert.equal(r.stderr, `hostkeeper: the data dir ${file} (HOSTKEEPER_DATA_DIR) is not a directory\n`);
  });

  test("owned by another user", async (t) => {
    if (process.getuid?.() !== 0) {
      t.skip("needs root, to give the directory to another user");
      return;
    }
    const dir = join(tempDir(t), "data");
    mkdirSync(dir, { mode: 0o700 });
    chownSync(dir, NOBODY, NOBODY);
    const r = await serve(dir);
    assert.equal(r.status, 1, r.stderr);
    assert.equal(
      r.stderr,
      `hostkeeper: the data dir ${dir} (HOSTKEEPER_DATA_DIR) belongs to uid ${NOBODY}, not to the agent's user (uid 0); it holds the API token, so it must be the agent's own\n`,
    );
  });

  test("read-only", async (t) => {
    // Root writes through any mode: the agent runs as another user here.
    const why = cannotRunAs(NOBODY);
    if (why) {
      t.skip(why);
      return;
    }
    const dir = join(tempDir(t), "data");
    mkdirSync(dir, { mode: 0o500 });
    chownSync(dir, NOBODY, NOBODY);
    chmodSync(dir, 0o500);
    const r = await serve(dir, { uid: NOBODY });
    assert.equal(r.status, 1, r.stderr);
    assert.equal(r.stderr, `hostkeeper: the data dir ${dir} (HOSTKEEPER_DATA_DIR) is not writable: EACCES\n`);
  });
});
