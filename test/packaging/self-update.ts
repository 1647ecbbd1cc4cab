/**
 * The agent updating itself from signed packages, in the booted container of systemd.test.ts, on the .deb
 * installed there: a release server inside (the operator test's, on 127.0.0.1:9100), packages at three
 * higher versions signed with a test key made by the real minisign, traffic through a route throughout.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { minisignKeypair } from "../helpers/minisign.js";
import type { Container } from "./container.js";
import { debAtVersion } from "./debs.js";

const bump = (v: string, by: number) => v.replace(/(\d+)$/, (n) => String(Number(n) + by));
const TOKEN = `-H "Authorization: Bearer $(cat /var/lib/hostkeeper/token)"`;
const SOURCE = "http://127.0.0.1:9100/agent";
const STRANGER_SOURCE = "http://127.0.0.1:9100/agent-stranger";
/**
 * A release whose agent never comes up: its CLI exits at once, `--version` aside. `status` too, as the whole
 * release is broken: the unit's `ExecStartPost=hostkeeper status --wait 60` would otherwise hold the
 * package's restart of the agent, and so its install, for a minute.
 */
const BROKEN_MAIN =
  'if (process.argv[2] !== "--version") { console.error("broken on purpose"); process.exit(3); }\n';
/** An update, with its installs and the agent's restarts, takes longer than the suite's default time-out. */
const LONG = { timeout: 400_000 };
const ROUTE_CURL = "curl -s --max-time 5 -H 'Host: app.localhost' http://127.0.0.1/";

interface Status {
  id: string;
  state: string;
  from_version: string;
  to_version: string | null;
  error: { code: string; message: string } | null;
  history: { state: string }[];
}

interface Setup {
  container: () => Container;
  /** The .deb installed now (at `installed`), and where the test may write. */
  installedDeb: () => string;
  installed: string;
  work: () => string;
  root: () => string;
}

/** Puts `deb` in `<releases>/<version>/` with its minisign signature by `key`. */
function publish(releases: string, version: string, deb: string, key: { sec: string }) {
  const dir = join(releases, version);
  mkdirSync(dir, { recursive: true });
  const dest = join(dir, `hostkeeper_${version}_amd64.deb`);
  copyFileSync(deb, dest);
  execFileSync("minisign", ["-S", "-s", key.sec, "-m", dest, "-t", `hostkeeper ${version}`], {
    stdio: "pipe",
  });
}

async function api(c: Container, method: string, path: string, body?: unknown): Promise<string> {
  const data = body === undefined ? "" : `-H 'content-type: application/json' -d '${JSON.stringify(body)}' `;
  return c.sh(`curl -s --max-time 10 -X ${method} ${TOKEN} ${data}http://127.0.0.1:8626${path}`);
}

/** Waits for update `id` to end (the API is away while the agent restarts); answers its final status. */
async function finalStatus(c: Container, id: string, ms: number): Promise<Status> {
  const deadline = Date.now() + ms;
  let last = "";
  while (Date.now() < deadline) {
    last = await api(c, "GET", `/v1/agent/update/${id}`).catch((e: Error) => e.message);
    const s = (() => {
      try {
        return JSON.parse(last) as Status;
      } catch {
        return undefined;
      }
    })();
    if (s && ["completed", "rolled_back", "failed"].includes(s.state)) return s;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`agent update ${id} did not end within ${ms} ms; last answer: ${last}`);
}

async function start(c: Container, body: unknown): Promise<Status> {
  const answer = await api(c, "POST", "/v1/agent/update", body);
  const s = JSON.parse(answer) as Status;
  assert.equal(s.state, "downloading", answer);
  return s;
}

const installedVersion = async (c: Container) =>
  // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own field syntax, not a JS template
  (await c.ok(["dpkg-query", "-W", "-f=${Status} ${Version}", "hostkeeper"])).trim();
const mainPid = async (c: Container, unit: string) =>
  Number((await c.ok(["systemctl", "show", "--property=MainPID", "--value", unit])).trim());

/** Requests through the route, one after the other, until `stop` is called; counts answers and failures. */
function traffic(c: Container) {
  const script = [
    "ok=0; failed=0",
    "while [ ! -e /run/hk-traffic-stop ]; do",
    `  if [ "$(${ROUTE_CURL})" = "backend ok" ]; then ok=$((ok+1)); else failed=$((failed+1)); fi`,
    "done",
    'echo "$ok $failed"',
  ].join("\n");
  const done = c.sh(script, { timeoutMs: 900_000 });
  // Read when stopped; a container stopped first ends it too.
  done.catch(() => undefined);
  return async () => {
    await c.ok(["touch", "/run/hk-traffic-stop"]);
    const [ok, failed] = (await done).trim().split(" ").map(Number);
    await c.ok(["rm", "-f", "/run/hk-traffic-stop"]);
    return { ok: ok ?? 0, failed: failed ?? -1 };
  };
}

export function selfUpdateTests(s: Setup): void {
  const c = () => s.container();
  const [good, broken, third] = [bump(s.installed, 1), bump(s.installed, 2), bump(s.installed, 3)];
  let stopTraffic: (() => Promise<{ ok: number; failed: number }>) | undefined;
  let caddyPid: number;
  after(async () => {
    await stopTraffic?.().catch(() => undefined);
  });

  test(
    "self-update: set up (keys, releases signed by them and by a stranger); a bad signature and a wrong checksum install nothing",
    LONG,
    async () => {
      const work = s.work();
      const releases = join(s.root(), "var/tmp/releases");
      const key = minisignKeypair(work, "agent");
      const stranger = minisignKeypair(work, "stranger");
      const [goodDeb, brokenDeb, thirdDeb] = await Promise.all([
        debAtVersion(s.installedDeb(), good, work),
        debAtVersion(s.installedDeb(), broken, work, (tree) => {
          const main = "usr/lib/hostkeeper/dist/src/cli/main.js";
          writeFileSync(join(tree, main), BROKEN_MAIN + readFileSync(join(tree, main), "utf8"));
          return [main];
        }),
        debAtVersion(s.installedDeb(), third, work),
      ]);
      publish(join(releases, "agent"), s.installed, s.installedDeb(), key);
      for (const [v, deb] of [
        [good, goodDeb],
        [broken, brokenDeb],
        [third, thirdDeb],
      ] as const)
        publish(join(releases, "agent"), v, deb, key);
      // The same releases, the new one signed by a key the agent does not trust (the way back is signed well).
      publish(join(releases, "agent-stranger"), s.installed, s.installedDeb(), key);
      publish(join(releases, "agent-stranger"), good, goodDeb, stranger);
      const config = JSON.parse(await c().ok(["cat", "/etc/hostkeeper/config.json"])) as object;
      const withUpdates = {
        ...config,
        agentUpdateKeys: [key.line],
        agentUpdateSource: SOURCE,
        agentUpdateTimeoutS: 10,
      };
      await c().sh(`cat > /etc/hostkeeper/config.json <<'EOF'\n${JSON.stringify(withUpdates, null, 2)}\nEOF`);
      await c().ok(["systemctl", "restart", "hostkeeper.service"], { timeoutMs: 90_000 });
      caddyPid = await mainPid(c(), "hostkeeper-caddy.service");
      stopTraffic = traffic(c());
      const agentPid = await mainPid(c(), "hostkeeper.service");

      const unsigned = await start(c(), { version: good, artifact_source: STRANGER_SOURCE });
      const refused = await finalStatus(c(), unsigned.id, 60_000);
      assert.equal(refused.state, "failed");
      assert.equal(refused.error?.code, "signature_unknown_key", JSON.stringify(refused));
      const wrong = await start(c(), { version: good, checksum: "0".repeat(64) });
      const mismatch = await finalStatus(c(), wrong.id, 60_000);
      assert.equal(mismatch.error?.code, "checksum_mismatch", JSON.stringify(mismatch));
      assert.deepEqual(
        mismatch.history.map((h) => h.state),
        ["downloading", "verifying", "failed"],
      );
      assert.equal(await installedVersion(c()), `install ok installed ${s.installed}`);
      assert.equal(await mainPid(c(), "hostkeeper.service"), agentPid);
    },
  );

  test(
    `self-update: ${s.installed} -> ${good} completes, reported by the new agent; Caddy keeps running`,
    LONG,
    async () => {
      const before = await mainPid(c(), "hostkeeper.service");
      // Started and followed by the CLI, through the agent's restart.
      const newest = async () =>
        (JSON.parse(await api(c(), "GET", "/v1/status")) as { agent_update: Status | null }).agent_update;
      const previous = (await newest())?.id;
      const cli = c().exec(["hostkeeper", "agent", "update", good], { timeoutMs: 300_000 });
      let u: Status | undefined;
      for (let i = 0; i < 100 && u === undefined; i++) {
        const latest = await newest();
        if (latest && latest.id !== previous) u = latest;
        else await new Promise((r) => setTimeout(r, 100));
      }
      if (!u) throw new Error("the CLI's update did not show in /v1/status");
      const again = JSON.parse(await api(c(), "POST", "/v1/agent/update", { version: good })) as {
        code?: string;
      };
      assert.equal(again.code, "update_in_progress");
      const followed = await cli;
      assert.equal(followed.code, 0, `${followed.stdout}\n${followed.stderr}`);
      assert.match(
        followed.stdout,
        new RegExp(`agent update ${u.id} completed: ${s.installed.replaceAll(".", "\\.")} -> `),
      );
      const done = await finalStatus(c(), u.id, 240_000);
      assert.equal(done.state, "completed", JSON.stringify(done));
      assert.deepEqual(
        done.history.map((h) => h.state),
        ["downloading", "verifying", "installing", "restarting", "completed"],
      );
      assert.equal((await c().ok(["hostkeeper", "--version"])).trim(), `hostkeeper ${good}`);
      assert.equal(await installedVersion(c()), `install ok installed ${good}`);
      const after = await mainPid(c(), "hostkeeper.service");
      assert.notEqual(after, before);
      const said = await c().ok([
        "journalctl",
        "-u",
        "hostkeeper.service",
        `_PID=${after}`,
        "-o",
        "cat",
        "--no-pager",
      ]);
      assert.match(said, new RegExp(`agent update ${u.id}: completed`));
      const status = JSON.parse(await api(c(), "GET", "/v1/status")) as { agent_update: Status };
      assert.equal(status.agent_update.id, u.id);
      assert.match(
        await c().ok(["hostkeeper", "status"]),
        new RegExp(
          `^self-update +${u.id} completed, ${s.installed.replaceAll(".", "\\.")} -> ${good.replaceAll(".", "\\.")}, at `,
          "m",
        ),
      );
      // The package now installed is kept for the next rollback; the update's folder is gone.
      assert.equal(
        (
          await c().ok([
            "ls",
            "/var/lib/hostkeeper/agent-update",
            "/var/lib/hostkeeper/agent-update/installed",
          ])
        ).trim(),
        `/var/lib/hostkeeper/agent-update:\ninstalled\n\n/var/lib/hostkeeper/agent-update/installed:\nhostkeeper_${good}_amd64.deb`,
      );
      assert.equal(await mainPid(c(), "hostkeeper-caddy.service"), caddyPid);
    },
  );

  test(`self-update: ${broken}, whose agent exits at start, is rolled back to ${good}`, LONG, async () => {
    const u = await start(c(), { version: broken });
    const done = await finalStatus(c(), u.id, 300_000);
    assert.equal(done.state, "rolled_back", JSON.stringify(done));
    assert.equal(done.error?.code, "not_ready");
    assert.match(
      done.error?.message ?? "",
      new RegExp(`did not answer ready as ${broken.replaceAll(".", "\\.")} within 10 s`),
    );
    assert.equal(await installedVersion(c()), `install ok installed ${good}`);
    assert.equal((await c().ok(["systemctl", "is-active", "hostkeeper.service"])).trim(), "active");
    assert.equal(await mainPid(c(), "hostkeeper-caddy.service"), caddyPid);
  });

  test(
    `self-update: the updater killed (kill -9) mid-install: the agent starts it again, and the update finishes or rolls back, and is reported`,
    LONG,
    async () => {
      const u = await start(c(), { version: third });
      const unit = `hostkeeper-agent-update-${u.id}-1`;
      const deadline = Date.now() + 120_000;
      let pid = 0;
      while (pid === 0 && Date.now() < deadline) {
        const r = await c().exec(["systemctl", "show", "--property=MainPID", "--value", unit]);
        pid = Number(r.stdout.trim()) || 0;
        if (pid === 0) await new Promise((r) => setTimeout(r, 100));
      }
      assert.ok(pid > 0, `${unit} never ran`);
      // kill is the shell's: minbase has no /bin/kill.
      await c().sh(`kill -9 ${pid}`);
      const done = await finalStatus(c(), u.id, 300_000);
      const journal = await c().ok(["journalctl", "-o", "cat", "--no-pager", "-n", "200"]);
      assert.ok(["completed", "rolled_back"].includes(done.state), `${JSON.stringify(done)}\n${journal}`);
      const version = done.state === "completed" ? third : good;
      const said = await c().ok(["journalctl", "-u", "hostkeeper.service", "-o", "cat", "--no-pager"]);
      assert.match(
        said,
        new RegExp(
          `agent update ${u.id}: the updater is gone before its last word; starting it again as ${unit.replace(/-1$/, "-2")}`,
        ),
      );
      assert.equal(await installedVersion(c()), `install ok installed ${version}`);
      assert.equal((await c().ok(["dpkg", "--audit"])).trim(), "");
      assert.equal((await c().ok(["hostkeeper", "--version"])).trim(), `hostkeeper ${version}`);
      if (!stopTraffic) throw new Error("no traffic");
      const { ok, failed } = await stopTraffic();
      stopTraffic = undefined;
      assert.equal(
        failed,
        0,
        `${failed} of ${ok + failed} requests through the route failed across the updates`,
      );
      assert.ok(ok > 50, `only ${ok} requests were made`);
      assert.equal(await mainPid(c(), "hostkeeper-caddy.service"), caddyPid);
    },
  );
}
