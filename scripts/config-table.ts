import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../src/paths.js";
import { configTableMarkdown } from "../src/settings.js";

/** Rewrites the settings table of the configuration page (between its markers) from the settings list. */
export const CONFIG_PAGE = join("docs", "configuration.md");
export const BEGIN = "<!-- config-table:begin -->";
export const END = "<!-- config-table:end -->";

export function pageWithTable(page: string): string {
  const a = page.indexOf(BEGIN);
  const b = page.indexOf(END);
  if (a === -1 || b === -1 || b < a) throw new Error(`${CONFIG_PAGE} lacks the config-table markers`);
  return `${page.slice(0, a + BEGIN.length)}\n${configTableMarkdown()}\n${page.slice(b)}`;
}

if (process.argv[1]?.endsWith("config-table.js")) {
  const path = join(projectRoot(), CONFIG_PAGE);
  writeFileSync(path, pageWithTable(readFileSync(path, "utf8")));
  console.log(`${CONFIG_PAGE}: settings table updated`);
}
