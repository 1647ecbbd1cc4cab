import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../src/paths.js";
import { configTableMarkdown } from "../src/settings.js";

/** Rewrites the configuration table in README.md (between its markers) from the settings list. */
export const BEGIN = "<!-- config-table:begin -->";
export const END = "<!-- config-table:end -->";

export function readmeWithTable(readme: string): string {
  const a = readme.indexOf(BEGIN);
  const b = readme.indexOf(END);
  if (a === -1 || b === -1 || b < a) throw new Error("README.md lacks the config-table markers");
  return `${readme.slice(0, a + BEGIN.length)}\n${configTableMarkdown()}\n${readme.slice(b)}`;
}

if (process.argv[1]?.endsWith("config-table.js")) {
  const path = join(projectRoot(), "README.md");
  writeFileSync(path, readmeWithTable(readFileSync(path, "utf8")));
  console.log("README.md configuration table updated");
}
