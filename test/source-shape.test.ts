import assert from "node:assert/strict";
import { test } from "node:test";
import { MAX_FILE_LINES, MAX_FUNCTION_LINES, oversized } from "../scripts/source-shape.js";

test(`every source file reads in one sitting (at most ${MAX_FILE_LINES} lines) and every function fits a screen (at most ${MAX_FUNCTION_LINES})`, () => {
  const found = oversized().map((o) => `${o.file}:${o.line} ${o.what ?? "(the file)"}: ${o.lines} lines`);
  assert.deepEqual(
    found,
    [],
    "split these by concept (`scripts/node dist/scripts/source-shape.js` lists them)",
  );
});
