import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { projectRoot } from "../src/paths.js";

// The suite's output names the runtime it ran on, so a CI log proves it was the pinned one and not the
// machine's Node (`npm` itself may run on an older system Node: package.json's scripts go through scripts/node).
test("the suite runs on the pinned Node.js LTS runtime", (t) => {
  t.diagnostic(`runtime: Node.js ${process.version} at ${process.execPath}`);
  const pinned = readFileSync(join(projectRoot(), "scripts/runtime.env"), "utf8").match(
    /^NODE_VERSION=(.+)$/m,
  );
  assert.equal(process.version, `v${pinned?.[1]}`);
  assert.equal(process.execPath, join(projectRoot(), ".cache/node/bin/node"));
  assert.ok(
    ["22", "24"].includes(process.versions.node.split(".")[0] ?? ""),
    "a supported LTS line: 22 or 24",
  );
});
