import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../../support/loopback.js";
import { waitFor } from "./wait.js";

type After = { after: (fn: () => unknown) => void };

/**
 * Debian's pebble, a real ACME server (RFC 8555), on loopback with its fake DNS (pebble-challtestsrv,
 * answering 127.0.0.1 for every name): it validates HTTP-01 on `httpPort` and TLS-ALPN-01 on `tlsPort` of
 * 127.0.0.1, where Caddy listens. Its own HTTPS listener has a certificate made here (`listenerCa`, a file
 * Caddy is told to trust, never the host's stores). Both processes are stopped by their PIDs when the test
 * ends. ../shared/notes/acme-pebble.md has the recipe.
 */
export async function startPebble(t: After, o: { httpPort: number; tlsPort: number }) {
  const dir = mkdtempSync(join(tmpdir(), "hk-pebble-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  execFileSync(
    "openssl",
    [
      ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"],
      ...["-keyout", "key.pem", "-out", "cert.pem", "-days", "2", "-subj", "/CN=pebble test listener"],
      ...["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
    ],
    { cwd: dir, stdio: "pipe" },
  );
  const [dns, dnsMgmt, directory, mgmt] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  const config = {
    pebble: {
      listenAddress: `127.0.0.1:${directory}`,
      managementListenAddress: `127.0.0.1:${mgmt}`,
      certificate: join(dir, "cert.pem"),
      privateKey: join(dir, "key.pem"),
      httpPort: o.httpPort,
      tlsPort: o.tlsPort,
      ocspResponderURL: "",
      externalAccountBindingRequired: false,
    },
  };
  writeFileSync(join(dir, "pebble.json"), JSON.stringify(config));
  const started = (cmd: string, args: string[], env: Record<string, string> = {}) => {
    const child = spawn(cmd, args, {
      env: { PATH: process.env.PATH, ...env },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr?.on("data", (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4000);
    });
    t.after(() => {
      if (child.pid !== undefined && child.exitCode === null) process.kill(child.pid, "SIGKILL");
    });
    return { child, stderr: () => stderr };
  };
  const fakeDns = started("pebble-challtestsrv", [
    ...["-dns01", `127.0.0.1:${dns}`, "-http01", "", "-https01", "", "-tlsalpn01", ""],
    ...["-management", `127.0.0.1:${dnsMgmt}`, "-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""],
  ]);
  const server = started("pebble", ["-config", join(dir, "pebble.json"), "-dnsserver", `127.0.0.1:${dns}`], {
    PEBBLE_VA_NOSLEEP: "1",
  });
  const listenerCa = join(dir, "cert.pem");
  const ca = readFileSync(listenerCa);
  const get = (url: string) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      https
        .get(url, { ca }, (res) => {
          let body = "";
          res.on("data", (c: Buffer) => {
            body += c.toString();
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
        })
        .on("error", reject);
    });
  const directoryUrl = `https://127.0.0.1:${directory}/dir`;
  await waitFor(
    "pebble's directory",
    () =>
      get(directoryUrl).then(
        (r) => (r.status === 200 ? true : undefined),
        () => undefined,
      ),
    15_000,
  ).catch((err: Error) => {
    throw new Error(`${err.message}; pebble said: ${server.stderr()} / ${fakeDns.stderr()}`);
  });
  return {
    directory: directoryUrl,
    listenerCa,
    /** The root pebble issues from (new at every start), in PEM. */
    issuingRoot: async () => (await get(`https://127.0.0.1:${mgmt}/roots/0`)).body,
    /** Makes the fake DNS answer `ip` for `host` (a host pebble then cannot reach on Caddy's ports). */
    resolve: (host: string, ip: string) =>
      manage(dnsMgmt, "/add-a", JSON.stringify({ host, addresses: [ip] })),
  };
}

/** POSTs `body` to pebble-challtestsrv's management API on `port`. */
function manage(port: number, path: string, body: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        path,
        method: "POST",
        headers: { "content-length": Buffer.byteLength(body) },
      },
      (res) => {
        res.resume();
        res.on("end", () =>
          res.statusCode === 200
            ? resolve()
            : reject(new Error(`pebble-challtestsrv ${path}: ${res.statusCode}`)),
        );
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}
