/**
 * The packages as a host gets them. `npm run package` builds the .debs and RPMs (amd64 and arm64) once for
 * this file; a
 * Debian 12 container booted with systemd installs, upgrades, removes and purges the .deb with dpkg, then
 * installs and erases the RPM with rpm, while requests go through the packaged Caddy. lintian, rpm's own
 * queries and a scratch-root install check the packages from outside.
 */
import assert from "node:assert/strict";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { basename, join } from "node:path";
import { after, before, describe, test } from "node:test";
import { OPENAPI_DOC } from "../../src/http/openapi.js";
import { packageVersion, projectRoot } from "../../src/paths.js";
import { testCa } from "../certificates/support.js";
import { elfMachine, runArm64, startArm64Agent } from "./arm64.js";
import { Container, check, debianRoot, type RunResult, run } from "./container.js";
import { debAtVersion } from "./debs.js";
import { selfUpdateTests } from "./self-update.js";

const version = packageVersion();
/** The upgrade: the same package rebuilt at a higher version. */
const nextVersion = version.replace(/(\d+)$/, (n) => String(Number(n) + 1));
const ROUTE = "app.localhost";
/** A request to the route through Caddy on the container's loopback. */
const CURL = `curl -s --max-time 5 -H 'Host: ${ROUTE}' http://127.0.0.1/`;
const OPERATOR = "operator.localhost";
/** The kernel setting the packages' sysctl file sets, in the container's own network namespace. */
const MIGRATE_REQ = "/proc/sys/net/ipv4/tcp_migrate_req";
const CURL_OPERATOR = `curl -s --max-time 5 -H 'Host: ${OPERATOR}' http://127.0.0.1/`;
/** An operator release: a script running the bundled Node as an HTTP server on $PORT, healthy at /health. */
const OPERATOR_ARTIFACT = `#!/bin/sh
exec /usr/lib/hostkeeper/node/bin/node -e "require('http').createServer((q, s) => s.end(q.url === '/health' ? 'ok' : 'operator ' + process.env.OPERATOR_VERSION)).listen(Number(process.env.PORT), '127.0.0.1')"
`;
/** Serves /var/tmp/releases (the operator's artifacts) and accepts the agent's callbacks, on 127.0.0.1:9100. */
const ARTIFACT_SERVER = `
const fs = require("fs");
require("http").createServer((q, s) => {
  if (q.method !== "GET") { q.resume(); s.statusCode = 204; return s.end(); }
  fs.readFile("/var/tmp/releases" + q.url.split("?")[0].replaceAll("..", ""), (err, data) => {
    s.statusCode = err ? 404 : 200;
    s.end(err ? "" : data);
  });
}).listen(9100, "127.0.0.1");
`;

interface Built {
  deb: string;
  rpm: string;
  nextDeb: string;
  /** The arm64 .deb and aarch64 RPM of the same build. */
  armDeb: string;
  armRpm: string;
}

/** Sends requests to the route, one after the other, for `seconds`, from inside; counts answers and failures. */
function requestLoop(c: Container, seconds: number): Promise<{ ok: number; failed: number }> {
  const script = [
    `ok=0; failed=0; end=$(($(date +%s) + ${seconds}))`,
    'while [ "$(date +%s)" -lt "$end" ]; do',
    `  if [ "$(${CURL})" = "backend ok" ]; then ok=$((ok+1)); else failed=$((failed+1)); fi`,
    "done",
    'echo "$ok $failed"',
  ].join("\n");
  return c.sh(script, { timeoutMs: (seconds + 30) * 1000 }).then((out) => {
    const [ok, failed] = out.trim().split(" ").map(Number);
    return { ok: ok ?? 0, failed: failed ?? -1 };
  });
}

const mainPid = async (c: Container, unit: string) =>
  Number((await c.ok(["systemctl", "show", "--property=MainPID", "--value", unit])).trim());

/** The GOMEMLIMIT process `pid` of the container started with. */
const goMemLimitIn = async (c: Container, pid: number) =>
  (await c.ok(["cat", `/proc/${pid}/environ`]))
    .split("\0")
    .find((v) => v.startsWith("GOMEMLIMIT="))
    ?.slice(11);

async function waitFor<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe("packages", () => {
  let built: Built;
  let work: string;
  let container: Container | undefined;
  let lintian: Promise<RunResult>;
  let rootCopy: string | undefined;

  before(
    async () => {
      work = mkdtempSync("/var/tmp/hk-packaging-");
      const [rootDir, packaged] = await Promise.all([
        debianRoot(),
        check("bash", ["scripts/package.sh"], { cwd: projectRoot(), timeoutMs: 480_000 }),
      ]);
      const [deb, rpm, armDeb, armRpm] = packaged.trim().split("\n");
      assert.ok(deb && rpm && armDeb && armRpm, `npm run package printed ${JSON.stringify(packaged)}`);
      // lintian takes most of a minute a package: it runs while the container tests do.
      lintian = run("lintian", ["--tag-display-limit", "0", deb, armDeb], { cwd: work, timeoutMs: 400_000 });
      built = { deb, rpm, armDeb, armRpm, nextDeb: await debAtVersion(deb, nextVersion, work) };
      // Each run boots a fresh copy of the cached root: the tests install into it.
      rootCopy = join(work, "root");
      await check("cp", ["-a", rootDir, rootCopy], { timeoutMs: 120_000 });
      for (const f of [built.deb, built.nextDeb, built.rpm])
        copyFileSync(f, join(rootCopy, "var/tmp", basename(f)));
      container = await Container.boot(rootCopy);
    },
    { timeout: 600_000 },
  );

  after(
    async () => {
      await container?.stop();
      await lintian?.catch(() => undefined);
      if (work) rmSync(work, { recursive: true, force: true });
    },
    { timeout: 120_000 },
  );

  const c = () => {
    if (!container) throw new Error("no container");
    return container;
  };

  describe("the .deb under systemd", () => {
    test("dpkg -i enables and starts both units; Caddy runs as its own user, its admin API on a socket only", async () => {
      await c().ok(["dpkg", "-i", `/var/tmp/${basename(built.deb)}`], { timeoutMs: 120_000 });
      const units = ["hostkeeper.service", "hostkeeper-caddy.service"];
      assert.equal((await c().ok(["systemctl", "is-active", ...units])).trim(), "active\nactive");
      assert.equal((await c().ok(["systemctl", "is-enabled", ...units])).trim(), "enabled\nenabled");
      assert.equal((await c().ok(["stat", "-c", "%a %U", "/var/lib/hostkeeper/token"])).trim(), "600 root");
      const caddyPid = await mainPid(c(), "hostkeeper-caddy.service");
      assert.equal((await c().ok(["stat", "-c", "%U", `/proc/${caddyPid}`])).trim(), "hostkeeper-caddy");
      assert.equal(
        (
          await c().ok(["stat", "-c", "%a %U", "/run/hostkeeper-caddy", "/run/hostkeeper-caddy/admin.sock"])
        ).trim(),
        "700 hostkeeper-caddy\n600 hostkeeper-caddy",
      );
      // Caddy's default admin address is not open.
      assert.notEqual((await c().exec(["curl", "-s", "http://127.0.0.1:2019/config/"])).code, 0);
      // The agent uses that Caddy and started none of its own (the embedded one would live here).
      assert.notEqual((await c().exec(["test", "-e", "/var/lib/hostkeeper/caddy"])).code, 0);
      // The container's network namespace started with the kernel's default (0); the install applied the
      // package's sysctl file.
      assert.equal((await c().ok(["cat", MIGRATE_REQ])).trim(), "1");
      // Caddy runs with Go's memory limit: the unit's default, the same as the agent's setting's.
      assert.equal(await goMemLimitIn(c(), caddyPid), "768MiB");
    });

    test("hostkeeper --version", async () => {
      assert.equal((await c().ok(["hostkeeper", "--version"])).trim(), `hostkeeper ${version}`);
    });

    test("systemd-analyze verify accepts both installed units", async () => {
      const r = await c().exec([
        "systemd-analyze",
        "verify",
        "--man=no",
        "/lib/systemd/system/hostkeeper.service",
        "/lib/systemd/system/hostkeeper-caddy.service",
      ]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stderr.trim(), "");
    });

    test("a route added with the CLI serves traffic through Caddy, over HTTP and HTTPS", async () => {
      // A backend inside the container: the bundled Node as a transient unit.
      await c().ok([
        "systemd-run",
        "--unit=hk-test-backend",
        "/usr/lib/hostkeeper/node/bin/node",
        "-e",
        "require('http').createServer((q, s) => s.end('backend ok')).listen(9001, '127.0.0.1')",
      ]);
      await c().ok(["hostkeeper", "routes", "add", ROUTE, "127.0.0.1:9001"]);
      assert.match(
        await c().ok(["hostkeeper", "routes", "list"]),
        /^app\.localhost +app\.localhost +127\.0\.0\.1:9001/m,
      );
      await waitFor("the route answers", 15_000, async () =>
        (await c().sh(CURL)) === "backend ok" ? true : undefined,
      );
      const https = await c().sh(
        `curl -s --max-time 5 -k --resolve ${ROUTE}:443:127.0.0.1 https://${ROUTE}/`,
      );
      assert.equal(https, "backend ok");
      // The package ships the committed OpenAPI document, and the agent serves it (the generator is not packaged).
      const served = await c().sh(
        `curl -s --max-time 10 -H "Authorization: Bearer $(cat /var/lib/hostkeeper/token)" http://127.0.0.1:8626/v1/openapi.json`,
      );
      assert.deepEqual(
        JSON.parse(served),
        JSON.parse(readFileSync(join(projectRoot(), OPENAPI_DOC), "utf8")),
      );
    });

    test("under the units' users: a route's access log written by Caddy and tailed by the agent; a custom certificate served from copies only Caddy's user reads; Caddy's failures read from its journal", {
      timeout: 180_000,
    }, async (t) => {
      const api = (method: string, path: string, data?: unknown) =>
        c().sh(
          `curl -s --max-time 10 -X ${method} -H "Authorization: Bearer $(cat /var/lib/hostkeeper/token)" ` +
            `-H 'content-type: application/json' ${data ? `-d '${JSON.stringify(data)}' ` : ""}http://127.0.0.1:8626${path}`,
        );
      const logged = "logged.localhost";
      const created = JSON.parse(
        await api("POST", "/v1/proxy/routes", {
          domain: logged,
          upstreams: [{ dial: "127.0.0.1:9001" }],
          access_log: true,
        }),
      ) as { "@id"?: string };
      assert.equal(created["@id"], logged, JSON.stringify(created));
      await waitFor("the logged route answers", 15_000, async () =>
        (await c().sh(`curl -s --max-time 5 -H 'Host: ${logged}' http://127.0.0.1/x`)) === "backend ok"
          ? true
          : undefined,
      );
      const lines = await waitFor("its access log has the request", 15_000, async () => {
        const tail = JSON.parse(await api("GET", `/v1/proxy/routes/${logged}/access-log?lines=5`)) as {
          request?: { host?: string; uri?: string };
        }[];
        return Array.isArray(tail) && tail.some((l) => l.request?.uri === "/x") ? tail : undefined;
      });
      assert.ok(lines.every((l) => l.request?.host === logged));
      assert.equal(
        (await c().ok(["stat", "-c", "%U %a", "/var/lib/hostkeeper-caddy/access-logs"])).trim(),
        "hostkeeper-caddy 700",
      );

      const ca = testCa(t);
      const day = 86_400_000;
      const cert = ca.issue(
        ["custom.localhost"],
        new Date(Date.now() - day),
        new Date(Date.now() + 10 * day),
      );
      const put = JSON.parse(
        await api("PUT", "/v1/proxy/certificates/custom-localhost", {
          certificate_pem: cert.cert,
          key_pem: cert.key,
        }),
      ) as { serial?: string; source?: string };
      assert.equal(put.source, "custom", JSON.stringify(put));
      await api("POST", "/v1/proxy/routes", {
        domain: "custom.localhost",
        upstreams: [{ dial: "127.0.0.1:9001" }],
      });
      const served = await waitFor("the custom certificate is served", 15_000, async () => {
        const serial = (
          await c().sh(
            `/usr/lib/hostkeeper/node/bin/node -e "const s = require('tls').connect({ host: '127.0.0.1', port: 443, servername: 'custom.localhost', rejectUnauthorized: false }, () => { console.log(s.getPeerCertificate().serialNumber); s.end(); })"`,
          )
        ).trim();
        return serial.toUpperCase() === put.serial?.toUpperCase() ? serial : undefined;
      });
      assert.ok(served);
      const copies = (
        await c().sh("stat -c '%U %a %n' /var/lib/hostkeeper-caddy/data/caddy/hostkeeper-custom/*")
      )
        .trim()
        .split("\n");
      assert.equal(copies.length, 2, copies.join("; "));
      for (const line of copies) assert.match(line, /^hostkeeper-caddy 600 /);
      // A host no CA can be reached for (the container's network is private): missing, with the failure
      // Caddy logged to its journal.
      const unreachable = "no-ca.hostkeeper-test.net";
      await api("POST", "/v1/proxy/routes", { domain: unreachable, upstreams: [{ dial: "127.0.0.1:9001" }] });
      const failed = await waitFor("Caddy's failure in the certificates list", 90_000, async () => {
        const list = JSON.parse(await api("GET", "/v1/proxy/certificates")) as {
          certificates: { host: string | null; status: string; error?: { message: string } | null }[];
        };
        const e = list.certificates.find((x) => x.host === unreachable);
        return e?.error ? e : undefined;
      });
      assert.equal(failed.status, "missing");
      // Caddy's config names the files; the key itself is nowhere in it.
      const config = await c().sh(
        "curl -s --unix-socket /run/hostkeeper-caddy/admin.sock http://localhost/config/",
      );
      assert.match(config, /load_files/);
      assert.doesNotMatch(config, /PRIVATE KEY/);
    });

    test("systemctl restart hostkeeper with requests going on: none fails, Caddy keeps its PID", async () => {
      const agentBefore = await mainPid(c(), "hostkeeper.service");
      const caddyBefore = await mainPid(c(), "hostkeeper-caddy.service");
      const loop = requestLoop(c(), 6);
      await new Promise((r) => setTimeout(r, 1000));
      await c().ok(["systemctl", "restart", "hostkeeper.service"], { timeoutMs: 60_000 });
      const { ok, failed } = await loop;
      assert.equal(failed, 0, `${failed} of ${ok + failed} requests failed`);
      assert.ok(ok > 20, `only ${ok} requests were sent`);
      assert.notEqual(await mainPid(c(), "hostkeeper.service"), agentBefore);
      assert.equal(await mainPid(c(), "hostkeeper-caddy.service"), caddyBefore);
      // "active" means answering: the unit waits for the agent's health check after its start.
      assert.match(
        await c().ok(["hostkeeper", "status"]),
        /^agent +running at 127\.0\.0\.1:8626, up .*, ready$/m,
      );
    });

    test("an operator instance the agent started survives agent restarts and stops; Caddy reads its upstream file", async () => {
      const config = JSON.parse(await c().ok(["cat", "/etc/hostkeeper/config.json"])) as Record<
        string,
        unknown
      >;
      const operatorConfig = {
        ...config,
        operatorDomain: OPERATOR,
        operatorCommunitySource: "http://127.0.0.1:9100",
        operatorAllowHttp: true,
        operatorWatchMs: 1000,
        operatorDrainMs: 0,
      };
      await c().ok([
        "/bin/sh",
        "-c",
        `cat > /etc/hostkeeper/config.json <<'EOF'\n${JSON.stringify(operatorConfig, null, 2)}\nEOF`,
      ]);
      await c().sh(
        `mkdir -p /var/tmp/releases/1.0.0 && cd /var/tmp/releases/1.0.0 && cat > operator <<'EOF'\n${OPERATOR_ARTIFACT}EOF\nsha256sum operator > SHA256SUMS`,
      );
      await c().ok([
        "systemd-run",
        "--unit=hk-test-artifacts",
        "/usr/lib/hostkeeper/node/bin/node",
        "-e",
        ARTIFACT_SERVER,
      ]);
      await c().ok(["systemctl", "restart", "hostkeeper.service"], { timeoutMs: 60_000 });
      const api = (method: string, path: string, data?: string) =>
        c().sh(
          `curl -s --max-time 10 -X ${method} -H "Authorization: Bearer $(cat /var/lib/hostkeeper/token)" ` +
            `-H 'content-type: application/json' ${data ? `-d '${data}' ` : ""}http://127.0.0.1:8626${path}`,
        );
      const body = JSON.stringify({
        callback_url: "http://127.0.0.1:9100/callback",
        update_process_id: "upd-1",
        version: "1.0.0",
      });
      const accepted = JSON.parse(await api("POST", "/v1/operator/update", body)) as { state?: string };
      assert.ok(accepted.state, JSON.stringify(accepted));
      await waitFor("the update completes", 60_000, async () => {
        const u = JSON.parse(await api("GET", "/v1/operator/update/upd-1")) as { state: string };
        if (u.state === "failed" || u.state === "rolled_back") throw new Error(JSON.stringify(u));
        return u.state === "completed" ? true : undefined;
      });
      // Through Caddy, which reads the upstream file on every request as its own user.
      assert.equal(await c().sh(CURL_OPERATOR), "operator 1.0.0");
      assert.equal(
        (
          await c().ok([
            "stat",
            "-c",
            "%a %U",
            "/var/lib/hostkeeper-proxy",
            "/var/lib/hostkeeper-proxy/operator-upstream",
          ])
        ).trim(),
        "755 root\n644 root",
      );
      const instance = JSON.parse(await api("GET", "/v1/operator/running-instance")) as { pid: number };

      await c().ok(["systemctl", "restart", "hostkeeper.service"], { timeoutMs: 60_000 });
      // The same process, adopted by the new agent, still serving through Caddy.
      await c().sh(`kill -0 ${instance.pid}`);
      const adopted = JSON.parse(await api("GET", "/v1/operator/running-instance")) as { pid: number };
      assert.equal(adopted.pid, instance.pid);
      assert.equal(await c().sh(CURL_OPERATOR), "operator 1.0.0");
      await c().ok(["systemctl", "stop", "hostkeeper.service"], { timeoutMs: 60_000 });
      await c().sh(`kill -0 ${instance.pid}`);
      assert.equal(await c().sh(CURL_OPERATOR), "operator 1.0.0");
      await c().ok(["systemctl", "start", "hostkeeper.service"], { timeoutMs: 60_000 });
    });

    test("kill -9 of Caddy's main process: systemd restarts it, routes intact, within 10 s, with the memory limit the agent's setting now names", async () => {
      // The setting changed in the config file: the agent writes it for Caddy, which takes it at its next start.
      const config = JSON.parse(await c().ok(["cat", "/etc/hostkeeper/config.json"])) as object;
      const edited = `${JSON.stringify({ ...config, caddyMemoryLimitMb: 1536 }, null, 2)}\n`;
      await c().ok(["/bin/sh", "-c", `cat > /etc/hostkeeper/config.json <<'EOF'\n${edited}EOF`]);
      await c().ok(["systemctl", "restart", "hostkeeper.service"], { timeoutMs: 60_000 });
      assert.match(await c().ok(["cat", "/var/lib/hostkeeper/caddy.env"]), /^GOMEMLIMIT=1536MiB$/m);
      const before = await mainPid(c(), "hostkeeper-caddy.service");
      assert.equal(await goMemLimitIn(c(), before), "768MiB");
      const killed = Date.now();
      await c().sh(`kill -9 ${before}`);
      const after = await waitFor("Caddy back with the route", 10_000, async () => {
        const pid = await mainPid(c(), "hostkeeper-caddy.service");
        if (pid === 0 || pid === before) return undefined;
        return (await c().sh(CURL)) === "backend ok" ? pid : undefined;
      });
      assert.ok(Date.now() - killed < 10_000);
      assert.notEqual(after, before);
      assert.match(await c().ok(["hostkeeper", "routes", "list"]), /^app\.localhost /m);
      assert.equal(await goMemLimitIn(c(), after), "1536MiB");
    });

    test("upgrade to a higher version: config edit and routes kept, agent restarted, Caddy not, no request lost", async () => {
      const config = JSON.parse(await c().ok(["cat", "/etc/hostkeeper/config.json"])) as Record<
        string,
        unknown
      >;
      const edited = `${JSON.stringify({ ...config, logLevel: "debug" }, null, 2)}\n`;
      await c().ok(["/bin/sh", "-c", `cat > /etc/hostkeeper/config.json <<'EOF'\n${edited}EOF`]);
      const agentBefore = await mainPid(c(), "hostkeeper.service");
      const caddyBefore = await mainPid(c(), "hostkeeper-caddy.service");
      const loop = requestLoop(c(), 12);
      await new Promise((r) => setTimeout(r, 500));
      const upgraded = await c().ok(["dpkg", "-i", `/var/tmp/${basename(built.nextDeb)}`], {
        timeoutMs: 120_000,
      });
      // A new Caddy binary: the running Caddy keeps its own until its next restart, and the upgrade says so.
      assert.match(upgraded, /Caddy keeps running its previous binary; 'systemctl restart hostkeeper-caddy'/);
      const { ok, failed } = await loop;
      assert.equal(failed, 0, `${failed} of ${ok + failed} requests failed during the upgrade`);
      assert.equal((await c().ok(["hostkeeper", "--version"])).trim(), `hostkeeper ${nextVersion}`);
      assert.equal(await c().ok(["cat", "/etc/hostkeeper/config.json"]), edited);
      assert.match(await c().ok(["hostkeeper", "config", "check"]), /^HOSTKEEPER_LOG_LEVEL +file +debug$/m);
      assert.notEqual(await mainPid(c(), "hostkeeper.service"), agentBefore);
      assert.equal(await mainPid(c(), "hostkeeper-caddy.service"), caddyBefore);
      assert.match(await c().ok(["hostkeeper", "routes", "list"]), /^app\.localhost /m);
      assert.equal(await c().sh(CURL), "backend ok");
      assert.equal(await c().sh(CURL_OPERATOR), "operator 1.0.0");
      // The custom certificate put before Caddy's kill and this upgrade is still the one served.
      const listed = JSON.parse(
        await c().sh(
          `curl -s --max-time 10 -H "Authorization: Bearer $(cat /var/lib/hostkeeper/token)" http://127.0.0.1:8626/v1/proxy/certificates/custom-localhost`,
        ),
      ) as { serial?: string };
      assert.ok(listed.serial, JSON.stringify(listed));
      const served = await c().sh(
        `/usr/lib/hostkeeper/node/bin/node -e "const s = require('tls').connect({ host: '127.0.0.1', port: 443, servername: 'custom.localhost', rejectUnauthorized: false }, () => { console.log(s.getPeerCertificate().serialNumber); s.end(); })"`,
      );
      assert.equal(served.trim().toUpperCase(), listed.serial.toUpperCase());
    });

    describe("self-update", () => {
      selfUpdateTests({
        container: c,
        installedDeb: () => built.nextDeb,
        installed: nextVersion,
        work: () => work,
        root: () => {
          if (!rootCopy) throw new Error("no container root");
          return rootCopy;
        },
      });
    });

    test("remove stops both units; purge removes the configuration and leaves no unit behind", async () => {
      const removed = await c().ok(["dpkg", "-r", "hostkeeper"], { timeoutMs: 60_000 });
      const states = await c().exec([
        "systemctl",
        "is-active",
        "hostkeeper.service",
        "hostkeeper-caddy.service",
      ]);
      assert.equal(states.stdout.trim(), "inactive\ninactive");
      // The operator instance is left running, and the removal says how to stop it; that works.
      assert.match(removed, /operator instances still running are left alone/);
      await c().ok(["systemctl", "kill", "hostkeeper.service"]);
      await waitFor("the operator instance stops", 10_000, async () =>
        (await c().exec(["curl", "-s", "--max-time", "2", "http://127.0.0.1:7101/health"])).code !== 0 &&
        (await c().exec(["curl", "-s", "--max-time", "2", "http://127.0.0.1:7102/health"])).code !== 0
          ? true
          : undefined,
      );
      const purge = await c().ok(["dpkg", "-P", "hostkeeper"], { timeoutMs: 60_000 });
      assert.match(purge, /Left in place.*\n.*\/var\/lib\/hostkeeper /);
      await c().ok(["systemctl", "daemon-reload"]);
      // list-unit-files exits 1 when it lists nothing.
      const files = await c().exec(["systemctl", "list-unit-files", "hostkeeper*"]);
      assert.match(files.stdout, /^0 unit files listed/m);
      assert.match(
        await c().ok(["systemctl", "list-units", "--all", "hostkeeper*"]),
        /^0 loaded units listed/m,
      );
      assert.equal(await c().ok(["find", "/etc/systemd", "/lib/systemd", "-name", "hostkeeper*"]), "");
      assert.notEqual((await c().exec(["test", "-e", "/etc/hostkeeper"])).code, 0);
      // What purge says it leaves: the agent's data and token, Caddy's state.
      await c().ok(["test", "-f", "/var/lib/hostkeeper/token"]);
      await c().ok(["test", "-f", "/var/lib/hostkeeper-caddy/config/caddy/autosave.json"]);
    });
  });

  describe("the RPM under systemd (rpm on the same Debian container, --nodeps)", () => {
    test("rpm -i enables and starts both units, and picks up the routes Caddy kept", async () => {
      // Back to the kernel's default, which the .deb's install had changed: the RPM's install sets it again.
      await c().ok(["sh", "-c", `echo 0 > ${MIGRATE_REQ}`]);
      await c().ok(["rpm", "-i", "--nodeps", `/var/tmp/${basename(built.rpm)}`], { timeoutMs: 120_000 });
      const units = ["hostkeeper.service", "hostkeeper-caddy.service"];
      assert.equal((await c().ok(["systemctl", "is-active", ...units])).trim(), "active\nactive");
      assert.equal((await c().ok(["systemctl", "is-enabled", ...units])).trim(), "enabled\nenabled");
      assert.equal((await c().ok(["hostkeeper", "--version"])).trim(), `hostkeeper ${version}`);
      assert.equal((await c().ok(["cat", MIGRATE_REQ])).trim(), "1");
      await waitFor("the route answers", 15_000, async () =>
        (await c().sh(CURL)) === "backend ok" ? true : undefined,
      );
    });

    test("rpm -e stops both units and leaves no unit behind", async () => {
      await c().ok(["rpm", "-e", "--nodeps", "hostkeeper"], { timeoutMs: 60_000 });
      await c().ok(["systemctl", "daemon-reload"]);
      assert.match(
        await c().ok(["systemctl", "list-units", "--all", "hostkeeper*"]),
        /^0 loaded units listed/m,
      );
      assert.equal(await c().ok(["find", "/etc/systemd", "/usr/lib/systemd", "-name", "hostkeeper*"]), "");
      assert.notEqual((await c().exec(["test", "-e", "/usr/lib/hostkeeper"])).code, 0);
    });
  });

  describe("the packages from outside", () => {
    // lintian has run beside the container tests; on a loaded machine it may still be at the arm64 .deb.
    test("lintian, on the amd64 and the arm64 .deb: no error and no warning (those kept are overridden, with reasons, in the package)", {
      timeout: 300_000,
    }, async () => {
      const r = await lintian;
      const flagged = r.stdout.split("\n").filter((l) => /^[EW]: /.test(l));
      assert.deepEqual(flagged, [], r.stdout + r.stderr);
    });

    test("the RPM has the .deb's files, its units in /usr/lib/systemd/system, its config a noreplace conffile", async () => {
      const debFiles = (await check("dpkg-deb", ["-c", built.deb]))
        .split("\n")
        .filter((l) => /^[-l]/.test(l))
        // perms owner size date time path: the path is the rest of the line (names may hold spaces).
        .map((l) => (/^\S+\s+\S+\s+\d+\s+\S+\s+\S+\s(.*?)(?: -> .*)?$/.exec(l)?.[1] ?? "").replace(/^\./, ""))
        .filter((p) => !p.startsWith("/usr/share/lintian/"))
        .map((p) => p.replace(/^\/lib\/systemd\/system\//, "/usr/lib/systemd/system/"))
        .sort();
      const rpmFiles = (await check("rpm", ["-qp", "--qf", "[%{FILEMODES:perms} %{FILENAMES}\n]", built.rpm]))
        .split("\n")
        .filter((l) => l !== "" && !l.startsWith("d"))
        .map((l) => l.slice(l.indexOf(" ") + 1))
        .sort();
      assert.deepEqual(rpmFiles, debFiles);
      assert.equal(
        (await check("rpm", ["-qp", "--configfiles", built.rpm])).trim(),
        "/etc/hostkeeper/config.json",
      );
      assert.equal((await check("rpm", ["-qp", "--qf", "%{VERSION}", built.rpm])).trim(), version);
      // On upgrade (postun of the old package with $1 >= 1) the agent is restarted, Caddy only started.
      const scripts = await check("rpm", ["-qp", "--scripts", built.rpm]);
      const postun = scripts.slice(scripts.indexOf("postuninstall scriptlet"));
      assert.match(postun, /systemctl try-restart hostkeeper\.service/);
      assert.doesNotMatch(postun, /restart hostkeeper-caddy/);
    });

    test("the arm64 packages are arm64 through and through, with the amd64 packages' files", async () => {
      const root = join(work, "arm64-root");
      await check("dpkg-deb", ["-x", built.armDeb, root]);
      const lib = join(root, "usr/lib/hostkeeper");
      for (const f of [
        "node/bin/node",
        "caddy/caddy",
        "node_modules/better-sqlite3/prebuilds/linux-arm64.node",
      ])
        assert.equal(elfMachine(join(lib, f)), 183, `${f} is an aarch64 program`);
      assert.equal((await check("dpkg-deb", ["-f", built.armDeb, "Architecture"])).trim(), "arm64");
      assert.equal((await check("rpm", ["-qp", "--qf", "%{ARCH}", built.armRpm])).trim(), "aarch64");
      const files = async (rpm: string) =>
        (await check("rpm", ["-qpl", rpm])).replace(/linux-(x64|arm64)\.node/g, "linux-<arch>.node");
      assert.equal(await files(built.armRpm), await files(built.rpm));
    });

    // Emulated: some 20 s alone, longer beside the rest of the suite.
    test("under qemu, the arm64 Node runs the CLI and Caddy, and the agent with its embedded Caddy answers /readyz", {
      timeout: 300_000,
    }, async () => {
      const root = join(work, "arm64-root");
      if (!existsSync(root)) await check("dpkg-deb", ["-x", built.armDeb, root]);
      const lib = join(root, "usr/lib/hostkeeper");
      const node = join(lib, "node/bin/node");
      const cli = join(lib, "dist/src/cli/main.js");
      assert.equal((await runArm64(node, [cli, "--version"])).trim(), `hostkeeper ${version}`);
      const dir = mkdtempSync(join(work, "arm64-run-"));
      const checked = await runArm64(node, [cli, "config", "check"], {
        PATH: process.env.PATH,
        HOSTKEEPER_DATA_DIR: dir,
      });
      assert.match(checked, /^configuration is valid/);
      const pinned = /^CADDY_VERSION=(\d+\.\d+\.\d+)/m.exec(
        readFileSync(join(projectRoot(), "scripts/caddy.env"), "utf8"),
      );
      assert.match(await runArm64(join(lib, "caddy/caddy"), ["version"]), new RegExp(`^v?${pinned?.[1]}`));
      const agent = await startArm64Agent(root, dir);
      await agent.stop();
    });

    test("rpm --root installs into a scratch root, where the bundled Node runs the CLI", async () => {
      const scratch = join(work, "rpm-root");
      await check("rpm", ["--root", scratch, "-i", "--nodeps", "--noscripts", built.rpm], {
        timeoutMs: 120_000,
      });
      for (const f of [
        "usr/bin/hostkeeper",
        "usr/lib/systemd/system/hostkeeper.service",
        "usr/lib/systemd/system/hostkeeper-caddy.service",
        "usr/lib/sysusers.d/hostkeeper.conf",
        "usr/lib/sysctl.d/60-hostkeeper.conf",
        "etc/hostkeeper/config.json",
        "usr/lib/hostkeeper/caddy/caddy",
      ])
        assert.ok(existsSync(join(scratch, f)), f);
      const lib = join(scratch, "usr/lib/hostkeeper");
      const out = await check(join(lib, "node/bin/node"), [join(lib, "dist/src/cli/main.js"), "--version"]);
      assert.equal(out.trim(), `hostkeeper ${version}`);
      const caddy = await check(join(lib, "caddy/caddy"), ["version"]);
      const pinned = /^CADDY_VERSION=(\d+\.\d+\.\d+)/m.exec(
        readFileSync(join(projectRoot(), "scripts/caddy.env"), "utf8"),
      );
      assert.match(caddy, new RegExp(`^v?${pinned?.[1]}`));
    });
  });
});
