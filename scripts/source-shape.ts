import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import ts from "typescript";
import { projectRoot } from "../src/paths.js";

/** The longest a source file may be, and a function in it: each reads in one sitting, on one screen. */
export const MAX_FILE_LINES = 400;
export const MAX_FUNCTION_LINES = 80;

export interface Oversize {
  file: string;
  /** The function's name (`Class.method`, `<arrow>` inside its parent), or null for the file itself. */
  what: string | null;
  line: number;
  lines: number;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return e.name.endsWith(".ts") && !e.name.endsWith(".d.ts") ? [path] : [];
  });
}

function nameOf(node: ts.Node, source: ts.SourceFile): string {
  const named = node as ts.Node & { name?: ts.Node };
  if (named.name) return named.name.getText(source);
  if (ts.isConstructorDeclaration(node)) return "constructor";
  const parent = node.parent;
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent))
    return parent.name.getText(source);
  if (ts.isCallExpression(parent)) return `<callback of ${parent.expression.getText(source).slice(0, 40)}>`;
  return "<function>";
}

function qualified(node: ts.Node, source: ts.SourceFile): string {
  let owner = node.parent;
  while (owner && !ts.isClassLike(owner)) owner = owner.parent;
  const own = nameOf(node, source);
  return owner && ts.isClassLike(owner) && owner.name ? `${owner.name.getText(source)}.${own}` : own;
}

/** Every file under `src/` over MAX_FILE_LINES, and every function (of any kind) over MAX_FUNCTION_LINES. */
export function oversized(root = projectRoot()): Oversize[] {
  const out: Oversize[] = [];
  for (const path of sourceFiles(join(root, "src"))) {
    const text = readFileSync(path, "utf8");
    const file = relative(root, path);
    const source = ts.createSourceFile(path, text, ts.ScriptTarget.ES2022, true);
    const fileLines = source.getLineAndCharacterOfPosition(text.length).line + (text.endsWith("\n") ? 0 : 1);
    if (fileLines > MAX_FILE_LINES) out.push({ file, what: null, line: 1, lines: fileLines });
    const visit = (node: ts.Node): void => {
      if (ts.isFunctionLike(node) && (node as ts.FunctionLikeDeclaration).body) {
        const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
        const end = source.getLineAndCharacterOfPosition(node.getEnd()).line;
        const lines = end - start + 1;
        if (lines > MAX_FUNCTION_LINES)
          out.push({ file, what: qualified(node, source), line: start + 1, lines });
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return out;
}

if (process.argv[1]?.endsWith("source-shape.js")) {
  const found = oversized();
  for (const o of found)
    console.log(
      `${o.file}:${o.line} ${o.what ?? "(file)"}: ${o.lines} lines (at most ${o.what ? MAX_FUNCTION_LINES : MAX_FILE_LINES})`,
    );
  console.log(
    found.length === 0 ? "every file and function is within its size" : `${found.length} over their size`,
  );
  process.exitCode = found.length === 0 ? 0 : 1;
}
