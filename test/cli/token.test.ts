import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { describe, test } from "node:test";
import type { AuditRecord } from "../../src/access/audit-store.js";
import { httpRequest } from "../../support/loopback.js";
import { buildTestApp } from "../helpers/app.js";
import { secretOf, sha256Hex, writeTokensFile } from "../http/support.js";
import { problemLine, runCli } from "./support.js";

type After = { after: (fn: () => unknown) => void };

/** An agent with a generated token and a tokens file holding `ci`; the CLI's environment to reach it. */
async function agentWithTokens(t: After) {
  const file = writeTokensFile(t, [{ name: "ci", scopes: ["proxy:read"], secret: secretOf("ci") }]);
  const h = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9",
    HOSTKEEPER_TOKEN: "",
    HOSTKEEPER_TOKENS_FILE: file,
  });
  await h.app.listen({ host: "127.0.0.1", port: 0 });
  const port = (h.app.server.address() as AddressInfo).port;
  const authenticates = async (secret: string) =>
    (await httpRequest(port, "GET", "/v1/openapi.json", { headers: { authorization: `Bearer ${secret}` } }))
      .status === 200;
  return {
    ...h,
    file,
    authenticates,
    env: { HOSTKEEPER_LISTEN: `127.0.0.1:${port}`, HOSTKEEPER_DATA_DIR: h.dataDir },
  };
}

describe("token rotate", () => {
  test("NAME: prints the new secret once, which works beside the old one; the file keeps only hashes", async (t) => {
    const agent = await agentWithTokens(t);
    const r = await runCli(["token", "rotate", "ci"], agent.env);
    assert.equal(r.code, 0, r.stderr);
    const secret = r.stdout.trim();
    assert.equal(r.stdout, `${secret}\n`);
    assert.match(r.stderr, /^the old secret of ci stays valid until \d{4}-\d\d-\d\dT/);
    assert.ok(await agent.authenticates(secret));
    assert.ok(await agent.authenticates(secretOf("ci")));
    const stored = readFileSync(agent.file, "utf8");
    assert.ok(stored.includes(sha256Hex(secret)));
    assert.ok(!stored.includes(secret));
    // Through the API, so in the audit trail under the CLI's token.
    const audit = agent.app.services.audit.list({ limit: 10 }) as AuditRecord[];
    assert.equal(audit.length, 1);
    assert.equal(audit[0]?.token, "default");
    assert.deepEqual(audit[0]?.summary, { operation: "rotateToken", name: "ci" });
  });

  test("without NAME: the agent's own token in <data dir>/token, which the CLI then uses", async (t) => {
    const agent = await agentWithTokens(t);
    const old = readFileSync(join(agent.dataDir, "token"), "utf8").trim();
    const r = await runCli(["token", "rotate", "--json"], agent.env);
    assert.equal(r.code, 0, r.stderr);
    const body = JSON.parse(r.stdout) as { name: string; token: string; previous_valid_until: string };
    assert.equal(body.name, "default");
    assert.equal(readFileSync(join(agent.dataDir, "token"), "utf8").trim(), body.token);
    const shown = await runCli(["token", "show"], agent.env);
    assert.equal(shown.stdout, `${body.token}\n`);
    assert.ok(await agent.authenticates(old), "the old secret works for the overlap");
    // The CLI's next command authenticates with the new secret.
    const again = await runCli(["token", "rotate", "ci"], agent.env);
    assert.equal(again.code, 0, again.stderr);
  });

  test("an unknown name: the agent's problem in one line, exit 1", async (t) => {
    const agent = await agentWithTokens(t);
    const r = await runCli(["token", "rotate", "nobody"], agent.env);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, "");
    const p = problemLine(r.stderr);
    assert.equal(p.status, 404);
    assert.equal(p.code, "token_not_found");
  });
});
