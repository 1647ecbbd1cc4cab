import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { OPENAPI_DOC, openApiText, withBuiltApp } from "../scripts/openapi-doc.js";
import { projectRoot } from "../src/paths.js";

test("docs/openapi.json is the document the agent serves", async () => {
  const served = await withBuiltApp(openApiText);
  const committed = readFileSync(join(projectRoot(), OPENAPI_DOC), "utf8");
  assert.ok(
    committed === served,
    `${OPENAPI_DOC} differs from the document the agent serves: run \`npm run build && npm run docs:openapi\` and commit it`,
  );
});
