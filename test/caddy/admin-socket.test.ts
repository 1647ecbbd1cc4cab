import assert from "node:assert/strict";
import { chownSync, lchownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import { CaddyAdmin, CaddyUnavailableError } from "../../src/caddy/admin.js";

/*
 * The packaged Caddy's admin socket is in a folder of Caddy's user (/run/hostkeeper-caddy): that user could
 * put a link to another daemon's socket in its place. The agent, as root, must never send it a request.
 */

const CADDY = 65534;

/** An HTTP server on a unix socket at `path` that counts the requests it gets. */
async function socketServer(t: TestContext, path: string): Promise<{ requests: () => number }> {
  let requests = 0;
  const server = http.createServer((req, res) => {
    requests++;
    req.resume();
    res.writeHead(200, { "content-type": "application/json" }).end("{}");
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { requests: () => requests };
}

function temp(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), "hk-admin-sock-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

describe("the admin socket in a folder of Caddy's user", {
  skip: process.getuid?.() === 0 ? false : "needs root",
}, () => {
  test("Caddy's own socket is used; a link in its place to another daemon's socket is refused, never connected", async (t) => {
    const top = temp(t);
    const run = join(top, "hostkeeper-caddy");
    mkdirSync(run, { mode: 0o700 });
    chownSync(run, CADDY, CADDY);
    const socket = join(run, "admin.sock");
    const caddy = await socketServer(t, socket);
    chownSync(socket, CADDY, CADDY);
    const admin = new CaddyAdmin({ kind: "unix", socketPath: socket }, 5_000);
    assert.equal((await admin.read("/config/")).status, 200);
    assert.equal(caddy.requests(), 1);

    // Another daemon of root's, listening on a socket elsewhere.
    const daemon = await socketServer(t, join(top, "daemon.sock"));
    rmSync(socket);
    symlinkSync(join(top, "daemon.sock"), socket);
    lchownSync(socket, CADDY, CADDY);
    await assert.rejects(
      admin.read("/config/", { attempts: 1 }),
      (err: unknown) => err instanceof CaddyUnavailableError && /admin\.sock is a link/.test(err.message),
    );
    assert.equal(daemon.requests(), 0);
  });

  test("no socket file is unreachable (ENOENT), as before", async (t) => {
    const admin = new CaddyAdmin({ kind: "unix", socketPath: join(temp(t), "admin.sock") }, 5_000);
    await assert.rejects(
      admin.read("/config/", { attempts: 1 }),
      (err: unknown) => err instanceof CaddyUnavailableError && /unreachable: ENOENT/.test(err.message),
    );
  });
});
