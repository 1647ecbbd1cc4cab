import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { test } from "node:test";
import ts from "typescript";
import { projectRoot } from "../src/paths.js";

/** The one module allowed to start processes: it takes only environments childEnv built. */
const SPAWNER = "src/util/child-env.ts";
const CHILD_PROCESS = new Set(["node:child_process", "child_process"]);

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return e.name.endsWith(".ts") ? [path] : [];
  });
}

/** Every place under src/ that reaches node:child_process for a value: imports, require() and import(). */
function childProcessUses(): { file: string; line: number; text: string }[] {
  const root = projectRoot();
  const found: { file: string; line: number; text: string }[] = [];
  for (const path of sourceFiles(join(root, "src"))) {
    const source = ts.createSourceFile(path, readFileSync(path, "utf8"), ts.ScriptTarget.ES2022, true);
    const at = (node: ts.Node) => ({
      file: relative(root, path),
      line: source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1,
      text: node.getText(source).slice(0, 120),
    });
    const visit = (node: ts.Node): void => {
      if (
        ts.isImportDeclaration(node) &&
        ts.isStringLiteral(node.moduleSpecifier) &&
        CHILD_PROCESS.has(node.moduleSpecifier.text) &&
        !node.importClause?.isTypeOnly
      ) {
        const named = node.importClause?.namedBindings;
        const allTypes =
          named !== undefined &&
          ts.isNamedImports(named) &&
          node.importClause?.name === undefined &&
          named.elements.every((e) => e.isTypeOnly);
        if (!allTypes) found.push(at(node));
      }
      if (
        ts.isCallExpression(node) &&
        (node.expression.kind === ts.SyntaxKind.ImportKeyword ||
          (ts.isIdentifier(node.expression) && node.expression.text === "require")) &&
        node.arguments.some((a) => ts.isStringLiteral(a) && CHILD_PROCESS.has(a.text))
      )
        found.push(at(node));
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return found;
}

test("every child the agent starts gets an allow-listed environment: only util/child-env.ts reaches node:child_process", () => {
  const outside = childProcessUses().filter((u) => u.file !== SPAWNER);
  assert.deepEqual(
    outside,
    [],
    `start children with spawnChild/execChild from ${SPAWNER}, which take only an environment childEnv built`,
  );
  // The walk finds what it looks for: the spawner itself is where node:child_process is imported.
  assert.ok(childProcessUses().some((u) => u.file === SPAWNER));
});
