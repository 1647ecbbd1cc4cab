import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { CHILD_ENV, childEnv } from "../../src/util/child-env.js";
import { freePort } from "../../support/loopback.js";
import { buildTestApp, TEST_TOKEN } from "../helpers/app.js";
import { aptAgentEnv, buildAptRepo, createAptSandbox, debianArch } from "../helpers/apt-sandbox.js";
import { caddyPid, startAgent } from "../helpers/serve.js";
import { waitFor } from "../helpers/wait.js";

/** What the agent's own environment may carry and no child may see. */
const SECRETS = {
  AWS_ACCESS_KEY_ID: "AKIDCHILDENVTEST",
  AWS_SECRET_ACCESS_KEY: "child-env-secret",
  AWS_SESSION_TOKEN: "child-env-session",
  HOSTKEEPER_TOKEN: "child-env-token-0123456789",
  HOSTKEEPER_OPERATOR_ENV: '{"DATABASE_URL":"postgres://u:p@db/x"}',
  SOME_UNRELATED_VARIABLE: "x",
};

const parseEnv = (text: string, sep: string) =>
  Object.fromEntries(
    text
      .split(sep)
      .filter((l) => l.includes("="))
      .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]),
  );

function assertNoSecrets(env: Record<string, string>, who: string): void {
  for (const name of Object.keys(env))
    assert.ok(
      !name.startsWith("AWS_") && !name.startsWith("HOSTKEEPER_") && name !== "SOME_UNRELATED_VARIABLE",
      `${who} got ${name}`,
    );
}

test("childEnv passes only what the allowlist names, prefixes included, and what is set", () => {
  const env = childEnv(
    {
      PATH: "/bin",
      AWS_SECRET_ACCESS_KEY: "s",
      DEBCONF_NOWARNINGS: "yes",
      DNF_VAR_x: "1",
      HOSTKEEPER_TOKEN: "t",
    },
    CHILD_ENV.packages,
    { LC_ALL: "C" },
  );
  assert.deepEqual(env, { PATH: "/bin", DEBCONF_NOWARNINGS: "yes", DNF_VAR_x: "1", LC_ALL: "C" });
});

test("apt, the maintainer scripts it runs, dpkg-deb reading changelogs and the reboot command get a minimal environment", async (t) => {
  // A maintainer script and the reboot command each write the environment they got.
  const repo = await buildAptRepo(
    { after: () => {} },
    [
      { name: "labenv", version: "1.0", suites: ["bookworm"] },
      {
        name: "labenv",
        version: "1.1",
        suites: ["bookworm-updates"],
        postinst:
          'env > "$DPKG_ROOT/run/postinst-env"\necho "*** System restart required ***" > "$DPKG_ROOT/run/reboot-required"',
      },
    ],
    debianArch(),
  );
  t.after(() => rmSync(repo.dir, { recursive: true, force: true }));
  const sandbox = await createAptSandbox(t, repo, { install: ["labenv=1.0"] });
  const dir = mkdtempSync(join(tmpdir(), "hk-child-env-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const script = join(dir, "reboot.sh");
  const rebootEnv = join(dir, "reboot-env");
  writeFileSync(script, '#!/bin/sh\nenv > "$1.tmp" && mv "$1.tmp" "$1"\n');
  chmodSync(script, 0o755);
  // dpkg-deb, found first on the PATH, writes the environment it got when it reads a package's files.
  const bin = join(dir, "bin");
  const dpkgDebEnv = join(dir, "dpkg-deb-env");
  mkdirSync(bin);
  writeFileSync(
    join(bin, "dpkg-deb"),
    `#!/bin/sh\n[ "$1" = --fsys-tarfile ] && env > "${dpkgDebEnv}"\nexec /usr/bin/dpkg-deb "$@"\n`,
  );
  chmodSync(join(bin, "dpkg-deb"), 0o755);
  // The agent reads its children's environment from its own; this file runs in its own process.
  Object.assign(process.env, SECRETS, {
    LANG: "C.UTF-8",
    no_proxy: "mirror.internal",
    PATH: `${bin}:${process.env.PATH}`,
  });
  const { app } = await buildTestApp(t, {
    ...aptAgentEnv(sandbox),
    HOSTKEEPER_REBOOT_COMMAND: `${script} ${rebootEnv}`,
    HOSTKEEPER_REBOOT_DELAY_MS: "0",
  });
  await app.listen({ host: "127.0.0.1", port: 0 });
  const res = await fetch(
    `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/v1/system/apply-updates`,
    {
      method: "POST",
      headers: { authorization: `Bearer ${TEST_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ update_type: "full", auto_reboot: true }),
    },
  );
  assert.equal(res.status, 200, await res.text());

  const postinst = parseEnv(readFileSync(join(sandbox.root, "run/postinst-env"), "utf8"), "\n");
  assertNoSecrets(postinst, "a maintainer script");
  assert.equal(postinst.APT_CONFIG, sandbox.aptConfig, "apt still reads the configured APT_CONFIG");
  assert.equal(postinst.DEBIAN_FRONTEND, "noninteractive");
  assert.equal(postinst.no_proxy, "mirror.internal", "proxy settings reach apt");
  assert.ok(postinst.PATH);

  // The apply's check read the new version's changelog.
  const dpkgDeb = parseEnv(readFileSync(dpkgDebEnv, "utf8"), "\n");
  assertNoSecrets(dpkgDeb, "dpkg-deb");
  assert.equal(dpkgDeb.LC_ALL, "C");
  assert.equal(dpkgDeb.APT_CONFIG, undefined, "dpkg-deb gets no apt variables");
  assert.equal(dpkgDeb.no_proxy, "mirror.internal");

  await waitFor("the reboot command", async () => (existsSync(rebootEnv) ? true : undefined));
  const reboot = parseEnv(readFileSync(rebootEnv, "utf8"), "\n");
  assertNoSecrets(reboot, "the reboot command");
  assert.equal(reboot.LANG, "C.UTF-8");
  assert.ok(reboot.PATH);
  assert.equal(reboot.no_proxy, undefined, "the reboot command needs no proxy");
});

test("the embedded Caddy gets a minimal environment", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "hk-caddy-env-"));
  const agent = await startAgent(t, {
    HOSTKEEPER_DATA_DIR: dataDir,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${await freePort()}`,
    ...SECRETS,
    HOSTKEEPER_TOKEN: SECRETS.HOSTKEEPER_TOKEN,
  });
  // Runs after startAgent's own clean-up (hooks run in order), once the agent and its Caddy are gone.
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const pid = caddyPid(dataDir);
  assert.ok(pid, agent.log());
  const env = parseEnv(readFileSync(`/proc/${pid}/environ`, "utf8"), "\0");
  assertNoSecrets(env, "Caddy");
  assert.equal(env.HOME, join(dataDir, "caddy"));
  assert.ok(env.PATH);
});
