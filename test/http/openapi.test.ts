import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { TEST_TOKEN } from "../helpers/app.js";
import { httpRequest } from "../helpers/http.js";
import { startGuardedAgent } from "./support.js";

const run = promisify(execFile);
const METHODS = ["get", "put", "post", "delete", "patch", "head", "options"];

type Operation = {
  operationId?: string;
  requestBody?: { required?: boolean };
  responses?: Record<string, unknown>;
};
type Doc = { servers?: unknown[]; paths: Record<string, Record<string, Operation>> };

async function servedDocument(
  t: Parameters<typeof startGuardedAgent>[0],
): Promise<{ doc: Doc; text: string }> {
  const agent = await startGuardedAgent(t);
  const res = await httpRequest(agent.port, "GET", "/v1/openapi.json", {
    headers: { authorization: `Bearer ${TEST_TOKEN}` },
  });
  assert.equal(res.status, 200);
  return { doc: JSON.parse(res.body) as Doc, text: res.body };
}

const operations = (doc: Doc) =>
  Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([m]) => METHODS.includes(m))
      .map(([method, op]) => ({ path, method, op })),
  );

test("redocly lint finds no error in the served document", async (t) => {
  const { text } = await servedDocument(t);
  const dir = mkdtempSync(join(tmpdir(), "hk-openapi-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, "openapi.json");
  writeFileSync(file, text);
  const config = join(process.cwd(), "redocly.yaml");
  const { stdout, stderr } = await run(
    join(process.cwd(), "node_modules/.bin/redocly"),
    ["lint", "--config", config, "--format", "json", file],
    { env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" } },
  ).catch((err: { stdout?: string; stderr?: string }) => ({
    stdout: err.stdout ?? "",
    stderr: err.stderr ?? "",
  }));
  const report = JSON.parse(stdout) as {
    totals: { errors: number; warnings: number };
    problems: { ruleId: string; severity: string; message: string }[];
  };
  const errors = report.problems.filter((p) => p.severity === "error");
  assert.deepEqual(errors, [], stderr);
  assert.equal(report.totals.errors, 0);
  // Warnings too: a rule that does not fit is turned off in redocly.yaml with its reason.
  assert.deepEqual(
    report.problems.filter((p) => p.severity === "warn").map((p) => `${p.ruleId}: ${p.message}`),
    [],
  );
});

test("every operation has a unique operationId and answers 401 as a problem", async (t) => {
  const { doc } = await servedDocument(t);
  const ops = operations(doc);
  assert.ok(ops.length >= 10);
  const ids = ops.map((o) => o.op.operationId);
  for (const o of ops) assert.ok(o.op.operationId, `${o.method} ${o.path} has no operationId`);
  assert.equal(new Set(ids).size, ids.length);
  for (const o of ops) assert.ok(o.op.responses?.["401"], `${o.method} ${o.path} documents no 401`);
  assert.ok(Array.isArray(doc.servers) && doc.servers.length > 0);
});

test("the delete body is optional in the document, as in the API", async (t) => {
  const { doc } = await servedDocument(t);
  const del = doc.paths["/v1/proxy/routes/{route_id}"]?.delete;
  assert.equal(del?.requestBody?.required, false);
  assert.equal(JSON.stringify(doc).includes("x-body-optional"), false);
  for (const o of operations(doc).filter((x) => x.op.requestBody && x.op !== del))
    assert.equal(o.op.requestBody?.required, true, `${o.method} ${o.path}`);
});
