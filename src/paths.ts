import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { fs } from "./util/node-builtins.js";

const { existsSync, readFileSync } = fs;

/** The project's root (the folder holding package.json), whether running from `src/` via tsx or from `dist/src/`. */
export function projectRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, "package.json"))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error("cannot find the project root (no package.json above the agent's code)");
    dir = up;
  }
}

/** The version in the project's package.json: the agent's and the CLI's, which ship together. */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(join(projectRoot(), "package.json"), "utf8")) as { version?: unknown };
  if (typeof pkg.version !== "string") throw new Error("package.json has no version");
  return pkg.version;
}
