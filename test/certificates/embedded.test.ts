import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { freePort } from "../../support/loopback.js";
import { alive, caddyPid, killEmbeddedCaddys, request, startAgent, stopAgent } from "../helpers/serve.js";
import { waitFor } from "../helpers/wait.js";
import { DAY, type Entry, peerCertificate, testCa } from "./support.js";

const TOKEN = "certificates-test-token-0123456789";

/**
 * An agent on its embedded Caddy, whose first config is one the test wrote as its autosave: the managed
 * server serving TLS on a loopback port, Caddy's internal CA as the only issuer, never installed into the
 * host's trust (`install_trust: false` from the first load).
 */
async function embeddedSetup(t: { after: (fn: () => unknown) => void }) {
  const dataDir = mkdtempSync(join(tmpdir(), "hk-certs-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const tlsPort = await freePort();
  const httpPort = await freePort();
  const caddyDir = join(dataDir, "caddy");
  mkdirSync(join(caddyDir, "config", "caddy"), { recursive: true, mode: 0o700 });
  const config = {
    admin: { listen: `unix/${join(caddyDir, "admin.sock")}|0600`, config: { persist: true } },
    apps: {
      http: {
        http_port: httpPort,
        https_port: tlsPort,
        grace_period: "10s",
        servers: {
          srv0: {
            listen: [`127.0.0.1:${tlsPort}`],
            routes: [],
            automatic_https: { disable_redirects: true },
          },
        },
      },
      tls: { automation: { policies: [{ issuers: [{ module: "internal" }] }] } },
      pki: { certificate_authorities: { local: { install_trust: false } } },
    },
  };
  writeFileSync(join(caddyDir, "config", "caddy", "autosave.json"), JSON.stringify(config));
  const configFile = join(dataDir, "config.json");
  writeFileSync(configFile, "{}");
  const env = {
    HOSTKEEPER_CONFIG: configFile,
    HOSTKEEPER_DATA_DIR: dataDir,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${tlsPort}`,
    HOSTKEEPER_TOKEN: TOKEN,
    HOSTKEEPER_CADDY_RESTART_BACKOFF_MS: "300",
    // As the saved config holds them: the agent's start changes none of them.
    HOSTKEEPER_TLS_ISSUER: "internal",
    HOSTKEEPER_CADDY_HTTP_PORT: String(httpPort),
    HOSTKEEPER_CADDY_HTTPS_PORT: String(tlsPort),
  };
  return { dataDir, caddyDir, tlsPort, env };
}

const served = async (port: number, host: string) =>
  (await peerCertificate(port, host)).serialNumber.toUpperCase();

describe("custom certificates with the embedded Caddy", () => {
  test("survive a Caddy restart and an agent restart; the key is in neither Caddy's autosave nor a log", async (t) => {
    const s = await embeddedSetup(t);
    const agent = await startAgent(t, s.env);
    const ca = testCa(t);
    const cert = ca.issue(["e.test"], new Date(Date.now() - DAY), new Date(Date.now() + 10 * DAY));
    const put = await request(agent.port, "PUT", "/v1/proxy/certificates/e-test", TOKEN, {
      certificate_pem: cert.cert,
      key_pem: cert.key,
    });
    assert.equal(put.status, 201, put.body);
    const serial = (JSON.parse(put.body) as Entry).serial;
    const route = await request(agent.port, "POST", "/v1/proxy/routes", TOKEN, {
      domain: "e.test",
      upstreams: [{ dial: "127.0.0.1:9" }],
    });
    assert.equal(route.status, 201, route.body);
    assert.equal(await served(s.tlsPort, "e.test"), serial);

    const keyLines = (/-----BEGIN [A-Z ]*PRIVATE KEY-----\n([\s\S]*?)-----END/.exec(cert.key)?.[1] ?? "")
      .split("\n")
      .filter((l) => l.length >= 40);
    const stored = readFileSync(join(s.dataDir, "certificates", "e-test.pem"), "utf8");
    keyLines.push(
      ...(/-----BEGIN PRIVATE KEY-----\n([\s\S]*?)-----END/.exec(stored)?.[1] ?? "")
        .split("\n")
        .filter((l) => l.length >= 40),
    );
    assert.ok(keyLines.length >= 2);
    const autosave = readFileSync(join(s.caddyDir, "config", "caddy", "autosave.json"), "utf8");
    assert.match(autosave, /load_files/);
    const places = {
      autosave,
      caddyLog: readFileSync(join(s.caddyDir, "caddy.log"), "utf8"),
      agentLog: agent.log(),
    };
    for (const [where, text] of Object.entries(places))
      for (const line of keyLines) assert.ok(!text.includes(line), `the key is in the ${where}`);

    // Caddy killed: the supervisor starts it again, its autosave (--resume) loads the same files.
    const before = caddyPid(s.dataDir);
    assert.ok(before !== undefined);
    process.kill(before, "SIGKILL");
    await waitFor(
      "a new Caddy serving the custom certificate",
      async () => {
        const pid = caddyPid(s.dataDir);
        if (pid === undefined || pid === before || !alive(pid)) return undefined;
        return (await served(s.tlsPort, "e.test")) === serial ? true : undefined;
      },
      20_000,
    );

    // The agent stopped and started again: Caddy already holds what the agent stored, and keeps it.
    assert.equal(await stopAgent(agent), 0);
    const again = await startAgent(t, s.env);
    const listed = await waitFor("the list", async () => {
      const r = await request(again.port, "GET", "/v1/proxy/certificates", TOKEN);
      return r.status === 200 ? (JSON.parse(r.body) as { certificates: Entry[] }).certificates : undefined;
    });
    assert.equal(listed.find((e) => e.host === "e.test")?.serial, serial);
    assert.equal(listed.find((e) => e.name === "e-test" && e.host === null)?.source, "custom");
    assert.equal(await served(s.tlsPort, "e.test"), serial);
    assert.doesNotMatch(again.log(), /loaded the custom certificates into Caddy/, "nothing was out of line");
    // Stopped here rather than by the hooks, which remove the data dir first: nothing may write it afterwards.
    assert.equal(await stopAgent(again), 0);
    await killEmbeddedCaddys(s.dataDir);
  });
});
