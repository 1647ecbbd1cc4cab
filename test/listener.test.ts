import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import https from "node:https";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import type { TLSSocket } from "node:tls";
import { AddressSet } from "../src/util/cidrs.js";
import { freePort } from "../support/loopback.js";
import { runCli } from "./cli/support.js";
import { startCaddy } from "./helpers/caddy.js";
import { type ServedAgent, spawnAgent } from "./helpers/serve.js";
import { issueClientCert, makeTestCa } from "./helpers/tls.js";
import { waitFor } from "./helpers/wait.js";

const TOKEN = "listener-test-token-0123456789";

interface TlsAnswer {
  status: number;
  body: string;
  /** SHA-256 fingerprint of the certificate the agent presented. */
  served: string;
}

/** One GET over TLS on a fresh connection; rejects when the handshake (or anything else) fails. */
function tlsGet(
  port: number,
  path: string,
  o: { ca: Buffer[]; client?: { cert: string; key: string }; token?: string },
): Promise<TlsAnswer> {
  return new Promise((resolve, reject) => {
    const req = https.get(
      {
        host: "127.0.0.1",
        port,
        path,
        agent: false,
        ca: o.ca,
        ...(o.client ? { cert: readFileSync(o.client.cert), key: readFileSync(o.client.key) } : {}),
        headers: o.token ? { authorization: `Bearer ${o.token}` } : {},
        timeout: 10_000,
      },
      (res) => {
        const served = (res.socket as TLSSocket).getPeerCertificate().fingerprint256;
        let body = "";
        res.on("data", (d: Buffer) => {
          body += d.toString();
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body, served }));
      },
    );
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", reject);
  });
}

/**
 * Connects from `localAddress`, sends a request head, and collects whatever comes back until the agent
 * closes the connection (or answers).
 */
function rawExchange(
  port: number,
  host: string,
  localAddress: string,
): Promise<{ received: string; closedBy: "peer" | "answer" }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host, localAddress });
    let received = "";
    socket.on("connect", () =>
      socket.write("GET /healthz HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"),
    );
    socket.on("data", (d: Buffer) => {
      received += d.toString();
    });
    socket.on("error", (err: NodeJS.ErrnoException) => {
      // A reset is the agent closing the accepted socket at once; it counts as closed by the peer.
      if (err.code === "ECONNRESET" || err.code === "EPIPE") resolve({ received, closedBy: "peer" });
      else reject(err);
    });
    socket.on("close", () => resolve({ received, closedBy: received === "" ? "peer" : "answer" }));
    socket.setTimeout(10_000, () => socket.destroy(new Error("no close within 10 s")));
  });
}

const fingerprintOf = (file: string) => new X509Certificate(readFileSync(file)).fingerprint256;

/** Replaces `dest` the way certificate tools do: write beside it, rename over it. */
function replaceFile(src: string, dest: string): void {
  copyFileSync(src, `${dest}.new`);
  renameSync(`${dest}.new`, dest);
}

async function started(t: { after: (fn: () => unknown) => void }, env: Record<string, string>, port: number) {
  const agent = spawnAgent(env, port);
  t.after(async () => {
    if (agent.child.exitCode === null && agent.child.signalCode === null) {
      process.kill(agent.child.pid as number, "SIGKILL");
      await agent.exited;
    }
  });
  await agent.waitForLog("started on Node", 20_000);
  return agent;
}

test("TLS on the listener, client certificates, reload of changed files, and the CLI over TLS", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "hk-tls-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const caDir = join(dir, "ca");
  const otherDir = join(dir, "other");
  const nextDir = join(dir, "next");
  const tlsDir = join(dir, "tls");
  for (const d of [caDir, otherDir, nextDir, tlsDir]) mkdirSync(d);
  const ca = makeTestCa(caDir);
  makeTestCa(otherDir);
  // Another server certificate for 127.0.0.1 (from another CA), for the reload.
  const next = makeTestCa(nextDir);
  const good = issueClientCert(caDir, "good-client");
  const expired = issueClientCert(caDir, "expired-client", { expired: true });
  const foreign = issueClientCert(otherDir, "foreign-client");
  const cert = join(tlsDir, "server.crt");
  const key = join(tlsDir, "server.key");
  replaceFile(join(caDir, "server.crt"), cert);
  replaceFile(join(caDir, "server.key"), key);
  const caddy = await startCaddy(t);
  const dataDir = mkdtempSync(join(tmpdir(), "hk-tls-data-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const env = {
    HOSTKEEPER_DATA_DIR: dataDir,
    HOSTKEEPER_TOKEN: TOKEN,
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_TLS_CERT: cert,
    HOSTKEEPER_TLS_KEY: key,
    HOSTKEEPER_TLS_CLIENT_CA: ca.caFile,
    HOSTKEEPER_TLS_RELOAD_INTERVAL_MS: "200",
  };
  const port = await freePort();
  const agent = await started(t, env, port);
  const trust = [readFileSync(ca.caFile), readFileSync(next.caFile)];
  const get = (path: string, client?: { cert: string; key: string }, token: string | undefined = TOKEN) =>
    tlsGet(port, path, { ca: trust, ...(client ? { client } : {}), ...(token ? { token } : {}) });

  await t.test("a client certificate from the client CA, with the token: answered", async () => {
    const health = await get("/healthz", good);
    assert.equal(health.status, 200);
    assert.equal(health.served, fingerprintOf(join(caDir, "server.crt")));
    assert.equal((await get("/v1/status", good)).status, 200);
  });

  await t.test("the token is still required on top of the certificate", async () => {
    assert.equal((await get("/v1/status", good, "")).status, 401);
  });

  await t.test("no certificate, one from another CA, an expired one: the handshake fails", async () => {
    await assert.rejects(get("/healthz"), /certificate required|socket hang up|ECONNRESET/i);
    await assert.rejects(get("/healthz", foreign), /unknown ca|certificate|ECONNRESET|socket hang up/i);
    await assert.rejects(get("/healthz", expired), /expired|certificate|ECONNRESET|socket hang up/i);
    await agent.waitForLog("a TLS handshake from 127.0.0.1 failed", 10_000);
  });

  await t.test("plain HTTP to the TLS port gets no HTTP answer", async () => {
    const r = await rawExchange(port, "127.0.0.1", "127.0.0.1");
    assert.doesNotMatch(r.received, /^HTTP\/1\.1 200/);
  });

  const cli = { ...env, HOSTKEEPER_LISTEN: `127.0.0.1:${port}` };
  await t.test(
    "hostkeeper status (the unit's probe) works over TLS with the CLI's client certificate",
    async () => {
      const r = await runCli(["status", "--wait", "10"], {
        ...cli,
        HOSTKEEPER_CLI_TLS_CERT: good.cert,
        HOSTKEEPER_CLI_TLS_KEY: good.key,
      });
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /agent/i);
    },
  );

  await t.test("without its client certificate the CLI says what to set", async () => {
    const r = await runCli(["status"], cli);
    assert.notEqual(r.code, 0);
    assert.match(r.stdout + r.stderr, /https:\/\/127\.0\.0\.1:\d+/);
    assert.match(r.stdout + r.stderr, /HOSTKEEPER_CLI_TLS_CERT/);
  });

  await t.test("the CLI pins the agent's certificate: another one at that address is refused", async () => {
    // The configuration names another certificate, followed by the CA that issued the one the agent serves:
    // the served one passes the chain check, and is still refused because it is not the pinned one.
    const pinned = join(dir, "pinned.crt");
    writeFileSync(
      pinned,
      Buffer.concat([readFileSync(join(nextDir, "server.crt")), readFileSync(ca.caFile)]),
    );
    const r = await runCli(["status"], {
      ...cli,
      HOSTKEEPER_TLS_CERT: pinned,
      HOSTKEEPER_TLS_KEY: join(nextDir, "server.key"),
      HOSTKEEPER_CLI_TLS_CERT: good.cert,
      HOSTKEEPER_CLI_TLS_KEY: good.key,
    });
    assert.notEqual(r.code, 0);
    assert.match(r.stdout, /cannot reach the agent at https:.* is not the one in .*pinned\.crt/);
  });

  await t.test("a changed certificate and key are picked up without a restart", async () => {
    replaceFile(join(nextDir, "server.key"), key);
    replaceFile(join(nextDir, "server.crt"), cert);
    const want = fingerprintOf(join(nextDir, "server.crt"));
    await waitFor("the new certificate", async () =>
      (await get("/healthz", good)).served === want ? true : undefined,
    );
    await agent.waitForLog("reloaded the API's TLS files", 10_000);
    assert.equal(agent.child.exitCode, null);
  });

  await t.test("a new pair that does not load is logged and the previous certificate kept", async () => {
    // Another certificate with the key of the one in use: they do not belong together.
    replaceFile(join(otherDir, "server.crt"), cert);
    await agent.waitForLog("do not load", 10_000);
    const r = await get("/healthz", good);
    assert.equal(r.status, 200);
    assert.equal(r.served, fingerprintOf(join(nextDir, "server.crt")));
  });
});

test("HOSTKEEPER_ALLOWED_CIDRS closes other connections before any HTTP", async (t) => {
  const caddy = await startCaddy(t);
  const dataDir = mkdtempSync(join(tmpdir(), "hk-cidr-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();
  const agent: ServedAgent = await started(
    t,
    {
      HOSTKEEPER_DATA_DIR: dataDir,
      HOSTKEEPER_TOKEN: TOKEN,
      HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
      HOSTKEEPER_ALLOWED_CIDRS: "127.0.0.2/32,10.0.0.0/8",
    },
    port,
  );

  await t.test("from 127.0.0.1 (not allowed): closed with no byte of HTTP", async () => {
    const r = await rawExchange(port, "127.0.0.1", "127.0.0.1");
    assert.equal(r.closedBy, "peer");
    assert.equal(r.received, "");
    await agent.waitForLog("outside HOSTKEEPER_ALLOWED_CIDRS", 10_000);
  });

  await t.test("from 127.0.0.2 (allowed): answered", async () => {
    const r = await rawExchange(port, "127.0.0.1", "127.0.0.2");
    assert.match(r.received, /^HTTP\/1\.1 200/);
  });
});

test("on a dual-stack listener, IPv4 peers arrive IPv4-mapped and are judged as IPv4", async (t) => {
  const caddy = await startCaddy(t);
  const dataDir = mkdtempSync(join(tmpdir(), "hk-cidr6-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();
  await started(
    t,
    {
      HOSTKEEPER_DATA_DIR: dataDir,
      HOSTKEEPER_TOKEN: TOKEN,
      HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
      HOSTKEEPER_LISTEN: `[::]:${port}`,
      HOSTKEEPER_ALLOW_PLAINTEXT: "true",
      HOSTKEEPER_ALLOWED_CIDRS: "127.0.0.2,::1/128",
    },
    port,
  );
  // The agent sees ::ffff:127.0.0.1, ::ffff:127.0.0.2 and ::1.
  assert.deepEqual(await rawExchange(port, "127.0.0.1", "127.0.0.1"), { received: "", closedBy: "peer" });
  assert.match((await rawExchange(port, "127.0.0.1", "127.0.0.2")).received, /^HTTP\/1\.1 200/);
  assert.match((await rawExchange(port, "::1", "::1")).received, /^HTTP\/1\.1 200/);
});

test("address sets: IPv4, IPv6, IPv4-mapped IPv6 and bare addresses", () => {
  const set = new AddressSet(["127.0.0.2/32", "10.0.0.0/8", "fd00::/8", "192.0.2.7"]);
  assert.ok(set.has("127.0.0.2"));
  assert.ok(!set.has("127.0.0.1"));
  assert.ok(set.has("10.200.3.4"));
  assert.ok(set.has("::ffff:10.1.2.3"), "an IPv4-mapped peer is judged as IPv4");
  assert.ok(!set.has("::ffff:127.0.0.1"));
  assert.ok(set.has("fd12:3456::1"));
  assert.ok(!set.has("fe80::1"));
  assert.ok(set.has("192.0.2.7"));
  assert.ok(!set.has("192.0.2.8"));
  assert.ok(!set.has("not-an-address"));
  assert.throws(() => new AddressSet(["10.0.0.0/33"]), /not an address range/);
});

test("plain HTTP beyond loopback refuses to start, with the reason; HOSTKEEPER_ALLOW_PLAINTEXT allows it", async (t) => {
  const caddy = await startCaddy(t);
  const dataDir = mkdtempSync(join(tmpdir(), "hk-plain-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();
  const env = {
    HOSTKEEPER_DATA_DIR: dataDir,
    HOSTKEEPER_TOKEN: TOKEN,
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_LISTEN: `0.0.0.0:${port}`,
  };
  const refused = spawnAgent(env, port);
  assert.equal(await refused.exited, 2);
  assert.match(
    refused.log(),
    /refusing to serve plain HTTP on 0\.0\.0\.0:\d+, which is not a loopback address/,
  );
  assert.match(refused.log(), /clear text/);
  assert.match(refused.log(), /HOSTKEEPER_TLS_CERT/);
  assert.match(refused.log(), /HOSTKEEPER_ALLOW_PLAINTEXT=true/);

  const allowed = await started(t, { ...env, HOSTKEEPER_ALLOW_PLAINTEXT: "true" }, port);
  const r = await rawExchange(port, "127.0.0.1", "127.0.0.1");
  assert.match(r.received, /^HTTP\/1\.1 200/);
  assert.equal(allowed.child.exitCode, null);
});

test("a certificate without its key, or with another's, is a configuration error", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "hk-pair-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();
  const agent = spawnAgent(
    {
      HOSTKEEPER_DATA_DIR: dataDir,
      HOSTKEEPER_CADDY_ADMIN: `http://127.0.0.1:${await freePort()}`,
      HOSTKEEPER_TLS_CERT: "/nonexistent/cert.pem",
    },
    port,
  );
  assert.equal(await agent.exited, 2);
  assert.match(agent.log(), /HOSTKEEPER_TLS_CERT: needs HOSTKEEPER_TLS_KEY too/);

  // A certificate with another certificate's key: refused before anything starts, naming the files.
  const a = mkdtempSync(join(tmpdir(), "hk-pair-a-"));
  const b = mkdtempSync(join(tmpdir(), "hk-pair-b-"));
  t.after(() => {
    rmSync(a, { recursive: true, force: true });
    rmSync(b, { recursive: true, force: true });
  });
  makeTestCa(a);
  makeTestCa(b);
  const mismatched = spawnAgent(
    {
      HOSTKEEPER_DATA_DIR: dataDir,
      HOSTKEEPER_CADDY_ADMIN: `http://127.0.0.1:${await freePort()}`,
      HOSTKEEPER_TLS_CERT: join(a, "server.crt"),
      HOSTKEEPER_TLS_KEY: join(b, "server.key"),
    },
    port,
  );
  assert.equal(await mismatched.exited, 2);
  assert.match(mismatched.log(), /HOSTKEEPER_TLS_CERT: cannot use .*server\.crt with .*server\.key/);
});
