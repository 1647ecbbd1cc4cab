import { fs } from "../util/node-builtins.js";
import { CliFailure } from "./agent.js";

/**
 * The text of the file `path` names (`-`: standard input). One that cannot be read fails the command
 * (exit code 1) in one line that names it.
 */
export function readInput(path: string): string {
  try {
    return fs.readFileSync(path === "-" ? 0 : path, "utf8");
  } catch (err) {
    throw new CliFailure(`cannot read ${path}: ${(err as Error).message}`);
  }
}

/** The JSON value of the file `path` names (`-`: standard input); text that is not JSON fails as above. */
export function readJsonInput(path: string): unknown {
  const text = readInput(path);
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new CliFailure(`${path} is not JSON: ${(err as Error).message}`);
  }
}
