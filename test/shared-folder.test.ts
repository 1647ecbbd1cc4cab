import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  existsSync,
  lchownSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { SharedFolder, UnsafePathError } from "../src/util/shared-folder.js";

/*
 * The one way root touches a folder another user can write. Each test plants what that user could: a link
 * at the folder or at a file, a FIFO, a file of a third user, a folder renamed away after it was opened.
 */

/** Caddy's user in these tests (nobody), and a third user. */
const CADDY = 65534;
const OTHER = 65533;

type T = { after: (fn: () => unknown) => void; skip: (why: string) => void };

/** A root-owned temporary folder (0755), removed after the test. */
function rootTemp(t: T): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-shared-"));
  chmodSync(dir, 0o755);
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A folder of Caddy's user under `parent`, as the packaged unit's state folder. */
function caddyFolder(parent: string, name = "caddy"): string {
  const dir = join(parent, name);
  mkdirSync(dir, { mode: 0o700 });
  chownSync(dir, CADDY, CADDY);
  return dir;
}

/** A file of root's that a planted link aims at: it must stay as it is. */
function victim(dir: string): string {
  const path = join(dir, "authorized_keys");
  writeFileSync(path, "ssh-ed25519 AAAA root's own\n", { mode: 0o600 });
  return path;
}

const unsafe = (pattern: RegExp) => (err: unknown) =>
  err instanceof UnsafePathError && pattern.test(err.message);

const asRoot = process.getuid?.() === 0;

describe("a folder another user owns", {
  skip: asRoot ? false : "needs root, to hand folders to other users",
}, () => {
  test("a link at the folder is refused, and nothing where it points is read, written or removed", (t) => {
    const top = rootTemp(t);
    const caddy = caddyFolder(top);
    const secrets = join(top, "secrets");
    mkdirSync(secrets, { mode: 0o700 });
    const keys = victim(secrets);
    symlinkSync(secrets, join(caddy, "logs"));
    assert.throws(() => SharedFolder.open(join(caddy, "logs")), unsafe(/logs is a link/));
    const folder = SharedFolder.open(caddy);
    t.after(() => folder.close());
    assert.throws(() => folder.folder("logs"), unsafe(/is a link/));
    assert.throws(() => folder.folder("logs", { create: true }), unsafe(/is a link/));
    assert.equal(readFileSync(keys, "utf8"), "ssh-ed25519 AAAA root's own\n");
    assert.equal(statSync(keys).uid, 0);
  });

  test("a link at a file is refused to read; removing it removes the link, never its target", (t) => {
    const top = rootTemp(t);
    const caddy = caddyFolder(top);
    const keys = victim(top);
    symlinkSync(keys, join(caddy, "a.log"));
    SharedFolder.with(caddy, {}, (folder) => {
      assert.throws(() => folder.readFile("a.log"), unsafe(/a\.log is a link/));
      folder.writeFile("a.log", "new\n", 0o600);
      assert.equal(readFileSync(keys, "utf8"), "ssh-ed25519 AAAA root's own\n");
      assert.ok(lstatSync(join(caddy, "a.log")).isFile());
      assert.deepEqual([statSync(join(caddy, "a.log")).uid, statSync(keys).uid], [CADDY, 0]);
      symlinkSync(keys, join(caddy, "b.log"));
      assert.equal(folder.remove("b.log"), true);
    });
    assert.ok(existsSync(keys));
  });

  test("a FIFO in place of a file is refused at once, without waiting for a writer", (t) => {
    const caddy = caddyFolder(rootTemp(t));
    execFileSync("mkfifo", [join(caddy, "route.log")]);
    SharedFolder.with(caddy, {}, (folder) => {
      assert.throws(() => folder.openFile("route.log"), unsafe(/is not a regular file/));
      assert.throws(() => folder.readFile("route.log"), unsafe(/is not a regular file/));
    });
  });

  test("a file of another user, or a second name of a root's file, is refused", (t) => {
    const caddy = caddyFolder(rootTemp(t));
    writeFileSync(join(caddy, "theirs.log"), "{}\n");
    chownSync(join(caddy, "theirs.log"), OTHER, OTHER);
    // A second name of a root's file: what a hard link to /etc/shadow would be.
    const top = join(caddy, "..");
    writeFileSync(join(top, "shadow"), "root:x\n", { mode: 0o600 });
    linkSync(join(top, "shadow"), join(caddy, "roots.log"));
    writeFileSync(join(caddy, "written-by-root.log"), "{}\n");
    writeFileSync(join(caddy, "own.log"), "{}\n");
    chownSync(join(caddy, "own.log"), CADDY, CADDY);
    SharedFolder.with(caddy, {}, (folder) => {
      assert.equal(folder.owner, CADDY);
      assert.throws(() => folder.readFile("theirs.log"), unsafe(/belongs to uid 65533, not 65534/));
      assert.throws(
        () => folder.readFile("roots.log"),
        unsafe(/belongs to uid 0, not 65534 \(a hard link\)/),
      );
      assert.equal(folder.readFile("written-by-root.log")?.toString(), "{}\n");
      assert.equal(folder.readFile("own.log")?.toString(), "{}\n");
    });
  });

  test("a folder below it of a third user, or one anyone may write, is refused", (t) => {
    const caddy = caddyFolder(rootTemp(t));
    const theirs = join(caddy, "theirs");
    mkdirSync(theirs);
    chownSync(theirs, OTHER, OTHER);
    const open = join(caddy, "open");
    mkdirSync(open);
    chownSync(open, CADDY, CADDY);
    chmodSync(open, 0o777);
    assert.throws(() => SharedFolder.open(theirs), unsafe(/belongs to uid 65533, not to uid 65534/));
    assert.throws(() => SharedFolder.open(open), unsafe(/writable by every user/));
    assert.throws(
      () => SharedFolder.open(caddy, { owner: OTHER }),
      unsafe(/belongs to uid 65534, not to uid 65533/),
    );
  });

  test("a folder renamed away after it was opened and replaced by a link: what is done goes where it was opened", (t) => {
    const top = rootTemp(t);
    const caddy = caddyFolder(top);
    const copies = caddyFolder(caddy, "copies");
    const elsewhere = join(top, "elsewhere");
    mkdirSync(elsewhere, { mode: 0o700 });
    SharedFolder.with(copies, {}, (folder) => {
      renameSync(copies, join(caddy, "moved"));
      symlinkSync(elsewhere, copies);
      folder.writeFile("x.crt", "pem\n", 0o600);
      assert.deepEqual(folder.names(), ["x.crt"]);
    });
    assert.ok(existsSync(join(caddy, "moved", "x.crt")));
    assert.ok(!existsSync(join(elsewhere, "x.crt")));
  });

  test("missing folders are made 0700 and given to the owner; a link in root's own folders is followed", (t) => {
    const top = rootTemp(t);
    const caddy = caddyFolder(top);
    // A link of root's, in a folder only root writes: an administrator's, followed.
    symlinkSync(caddy, join(top, "state"));
    SharedFolder.with(join(top, "state", "data", "custom"), { create: true }, (folder) => {
      assert.equal(folder.owner, CADDY);
      folder.writeFile("a.key", "key\n", 0o600);
    });
    for (const path of [join(caddy, "data"), join(caddy, "data", "custom")]) {
      const st = statSync(path);
      assert.deepEqual([st.uid, st.gid, st.mode & 0o777], [CADDY, CADDY, 0o700], path);
    }
    const key = statSync(join(caddy, "data", "custom", "a.key"));
    assert.deepEqual([key.uid, key.gid, key.mode & 0o777], [CADDY, CADDY, 0o600]);
    assert.equal(SharedFolder.ownerOf(join(top, "state", "not", "yet")), CADDY);
    assert.equal(SharedFolder.ownerOf(top), 0);
  });

  test("a link in a folder another user can write is never followed, even on the way to it", (t) => {
    const top = rootTemp(t);
    const caddy = caddyFolder(top);
    const secrets = join(top, "secrets");
    mkdirSync(secrets, { mode: 0o700 });
    symlinkSync(secrets, join(caddy, "data"));
    assert.throws(
      () => SharedFolder.open(join(caddy, "data", "custom"), { create: true }),
      unsafe(/data is a link another user could have put there/),
    );
    assert.ok(!existsSync(join(secrets, "custom")));
    // In a sticky folder anyone writes (/tmp), only a link of root's own is followed.
    const sticky = join(top, "tmp");
    mkdirSync(sticky);
    chmodSync(sticky, 0o1777);
    symlinkSync(secrets, join(sticky, "link"));
    lchownSync(join(sticky, "link"), CADDY, CADDY);
    assert.throws(
      () => SharedFolder.open(join(sticky, "link")),
      unsafe(/link another user could have put there/),
    );
  });
});

/** The modules that work in Caddy's user's folders: each touches files there through SharedFolder only. */
const IN_CADDYS_FOLDERS = [
  "src/caddy/admin.ts",
  "src/certificates/caddy-copies.ts",
  "src/certificates/caddy-storage.ts",
  "src/certificates/obtain-errors.ts",
  "src/access-logs/files.ts",
  "src/access-logs/service.ts",
];

/** What `fs` offers that takes a descriptor rather than a path. */
const ON_DESCRIPTORS = new Set(["close", "closeSync", "fstat", "fstatSync", "read", "readSync"]);

test("the modules that work in Caddy's folders call fs on descriptors only, never on a path", () => {
  const root = join(import.meta.dirname, "..", "..");
  for (const file of IN_CADDYS_FOLDERS) {
    const text = readFileSync(join(root, file), "utf8");
    const used = [
      ...[...text.matchAll(/\bfs\.(\w+)/g)].map((m) => m[1]),
      ...[...text.matchAll(/const \{([^}]*)\} = fs;/g)].flatMap((m) =>
        (m[1] ?? "").split(",").map((s) => s.trim()),
      ),
    ].filter((name): name is string => name !== undefined && name !== "" && name !== "constants");
    const onPaths = used.filter((name) => !ON_DESCRIPTORS.has(name));
    assert.deepEqual(onPaths, [], `${file}: use SharedFolder (src/util/shared-folder.ts) for these`);
  }
});
