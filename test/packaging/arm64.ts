/**
 * The arm64 package's programs, run on this x86-64 machine by qemu-user-static through the arm64 dynamic
 * loader of libc6-arm64-cross (with its libraries). Not `qemu-aarch64-static -L <sysroot>`: that makes `/`
 * the sysroot for the program, and the agent's walk of folders from `/` (util/shared-folder) would then
 * look for Caddy's admin socket inside the sysroot.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, closeSync, mkdirSync, openSync, readFileSync, readSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { freePort, httpRequest } from "../../support/loopback.js";
import { check } from "./container.js";

const SYSROOT = "/usr/aarch64-linux-gnu/lib";
const LOADER = ["qemu-aarch64-static", `${SYSROOT}/ld-linux-aarch64.so.1`, "--library-path", SYSROOT];

/** The ELF machine of a file (e_machine): 183 for aarch64, 62 for x86-64. */
export function elfMachine(path: string): number {
  const fd = openSync(path, "r");
  try {
    const head = Buffer.alloc(20);
    readSync(fd, head, 0, 20, 0);
    assert.equal(head.subarray(0, 4).toString("latin1"), "\x7fELF", `${path} is an ELF file`);
    return head.readUInt16LE(18);
  } finally {
    closeSync(fd);
  }
}

/** Runs an arm64 program of the package under qemu; rejects on a non-zero exit. */
export const runArm64 = (program: string, args: readonly string[], env?: NodeJS.ProcessEnv) =>
  check(LOADER[0] ?? "", [...LOADER.slice(1), program, ...args], {
    timeoutMs: 120_000,
    ...(env ? { env } : {}),
  });

/**
 * Starts the arm64 agent unpacked at `root` with its embedded arm64 Caddy, on loopback, managing no
 * packages (an apt sandbox of nothing) and rebooting nothing, and waits for `/readyz` to answer 200.
 * Returns how to stop it and its Caddy, by their PIDs.
 */
export async function startArm64Agent(root: string, dir: string) {
  const lib = join(root, "usr/lib/hostkeeper");
  // The agent starts Caddy as a program: this one runs the arm64 Caddy under qemu the same way.
  const caddy = join(dir, "caddy");
  writeFileSync(caddy, `#!/bin/sh\nexec ${LOADER.join(" ")} ${join(lib, "caddy/caddy")} "$@"\n`);
  chmodSync(caddy, 0o755);
  const apt = join(dir, "noapt");
  mkdirSync(apt);
  writeFileSync(join(apt, "status"), "");
  writeFileSync(join(dir, "apt.conf"), `Dir "${apt}/";\nDir::State::status "${apt}/status";\n`);
  const port = await freePort();
  const dataDir = join(dir, "data");
  const child = spawn(
    LOADER[0] ?? "",
    [...LOADER.slice(1), join(lib, "node/bin/node"), join(lib, "dist/src/cli/main.js"), "serve"],
    {
      env: {
        PATH: process.env.PATH,
        HOSTKEEPER_DATA_DIR: dataDir,
        HOSTKEEPER_LISTEN: `127.0.0.1:${port}`,
        HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${await freePort()}`,
        HOSTKEEPER_CADDY_BINARY: caddy,
        HOSTKEEPER_TLS_ISSUER: "off",
        HOSTKEEPER_PACKAGE_MANAGER: "apt",
        HOSTKEEPER_APT_CONFIG: join(dir, "apt.conf"),
        HOSTKEEPER_REBOOT_COMMAND: "/bin/true",
        HOSTKEEPER_HOOKS_DIR: join(dir, "no-hooks"),
      },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let log = "";
  child.stdout.on("data", (d: Buffer) => {
    log += d.toString();
  });
  child.stderr.on("data", (d: Buffer) => {
    log += d.toString();
  });
  const stop = async () => {
    if (child.exitCode === null && child.pid !== undefined) process.kill(child.pid, "SIGTERM");
    await new Promise((r) => (child.exitCode === null ? child.once("close", r) : r(null)));
    // The embedded Caddy outlives the agent (the next agent adopts it): stopped by its PID file.
    const caddyPid = Number(readFileSync(join(dataDir, "caddy/caddy.pid"), "utf8").trim());
    if (caddyPid > 0) process.kill(caddyPid, "SIGTERM");
  };
  // Slowly: Node and Caddy are emulated. Asked every 250 ms, up to two minutes.
  const end = Date.now() + 120_000;
  for (;;) {
    const r = await httpRequest(port, "GET", "/readyz").catch(() => undefined);
    if (r?.status === 200) break;
    if (child.exitCode !== null || Date.now() > end) {
      await stop().catch(() => undefined);
      throw new Error(`the arm64 agent did not answer /readyz with 200 (last: ${r?.status}):\n${log}`);
    }
    await new Promise((done) => setTimeout(done, 250));
  }
  return { port, stop, log: () => log };
}
