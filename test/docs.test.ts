import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { before, describe, test } from "node:test";
import { promisify } from "node:util";
import { CONFIG_PAGE } from "../scripts/config-table.js";
import { OPENAPI_DOC, openApiText, withBuiltApp } from "../scripts/openapi-doc.js";
import { projectRoot } from "../src/paths.js";
import { allSettings } from "../src/settings.js";

/**
 * The documentation kept in step with the code, as the settings table already is: what the pages name
 * (settings, CLI commands, endpoints, links) must exist, and what exists must be on some page.
 */

const root = projectRoot();
const run = promisify(execFile);

/** One build of the agent for the whole file: the routes it registers and the document it serves. */
let built: Promise<{ routes: { method: string; url: string }[]; openapi: string }> | undefined;
const agent = () => {
  built ??= withBuiltApp((app) => ({
    routes: app.registeredRoutes().map((r) => ({ method: r.method, url: r.url })),
    openapi: openApiText(app),
  }));
  return built;
};

/** The pages: README.md and everything under docs/, each with its path from the project's root. */
function pages(): { path: string; text: string }[] {
  const out = ["README.md"];
  const walk = (dir: string) => {
    for (const name of readdirSync(join(root, dir)).sort()) {
      const path = join(dir, name);
      if (statSync(join(root, path)).isDirectory()) walk(path);
      else if (name.endsWith(".md")) out.push(path);
    }
  };
  walk("docs");
  return out.map((path) => ({ path, text: readFileSync(join(root, path), "utf8") }));
}

/** The changelog is history: it may name what no longer exists, but its links must resolve. */
const CHANGELOG = "CHANGELOG.md";

/** The text of every code span and fenced block of a page, whitespace collapsed (a span may wrap). */
function codeOf(text: string): string[] {
  const out: string[] = [];
  const fences = /^```[^\n]*\n([\s\S]*?)^```/gm;
  for (const m of text.matchAll(fences)) out.push(...(m[1] ?? "").split("\n"));
  const prose = text.replace(fences, "");
  for (const m of prose.matchAll(/`([^`]+)`/g)) out.push((m[1] ?? "").replace(/\s+/g, " "));
  return out;
}

/** Where a string first occurs in a page, as `path:line`, for messages. */
function where(page: { path: string; text: string }, needle: string): string {
  const i = page.text.indexOf(needle);
  return i === -1 ? page.path : `${page.path}:${page.text.slice(0, i).split("\n").length}`;
}

describe("HOSTKEEPER_* settings", () => {
  // Names the pages may mention that are not settings, each for a reason.
  const notSettings: Record<string, string> = {
    HOSTKEEPER_CONFIG: "names the config file itself (src/config.ts)",
    HOSTKEEPER_LOG_FORMT: "the misspelt variable in the example of the start-up warning",
    // What the agent tells the host's hooks (src/system/hooks/hooks.ts), not what it reads.
    ...Object.fromEntries(
      ["HOOK_STAGE", "HOOK_NAME", "APPLY_ID", "UPDATE_TYPE", "TRIGGER", "APPLY_OUTCOME", "PACKAGES_FILE"].map(
        (n) => [`HOSTKEEPER_${n}`, "set by the agent for the host's hooks"],
      ),
    ),
  };
  const known = new Set(allSettings().map((s) => s.env));

  test("every HOSTKEEPER_* name the pages mention is a setting", () => {
    const unknown: string[] = [];
    for (const page of pages())
      for (const m of page.text.matchAll(/HOSTKEEPER_[A-Z0-9_]*[A-Z0-9]/g))
        if (!known.has(m[0]) && !(m[0] in notSettings)) unknown.push(`${where(page, m[0])}: ${m[0]}`);
    assert.deepEqual(
      [...new Set(unknown)],
      [],
      "these are no settings of src/settings.ts (or of an area's settings.ts): fix the page, or add the setting",
    );
  });

  test("every setting is in the configuration page's table", () => {
    const config = readFileSync(join(root, CONFIG_PAGE), "utf8");
    const notInTable = [...known].filter((env) => !config.includes(`| \`${env}\` |`));
    assert.deepEqual(
      notInTable,
      [],
      `run \`npm run build && npm run docs:config\` and commit ${CONFIG_PAGE}`,
    );
  });
});

describe("CLI commands", () => {
  const cli = async (...args: string[]) =>
    (
      await run(process.execPath, [join(root, "dist/src/cli/main.js"), ...args], {
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
      })
    ).stdout;
  /** Every command of `hostkeeper --help`, by its words, with the options its own `--help` lists. */
  const commands = new Map<string, Set<string>>();
  before(async () => {
    const top = await cli("--help");
    const start = top.indexOf("commands:\n") + "commands:\n".length;
    const names = top
      .slice(start, top.indexOf("\n\n", start))
      .split("\n")
      .map((line) => line.trim().split(/\s{2,}/)[0] ?? "")
      .filter(Boolean);
    const helps = await Promise.all(names.map((words) => cli(...words.split(" "), "--help")));
    names.forEach((words, i) => {
      const options = [...(helps[i] ?? "").matchAll(/^\s+(?:-h, )?--([a-z-]+)/gm)].map((m) => m[1] as string);
      commands.set(words, new Set(options));
    });
    assert.ok(commands.size >= 10, `only ${commands.size} commands read from \`hostkeeper --help\`:\n${top}`);
  });

  /** `hostkeeper <words> [args and options]` as the pages write it in code. */
  function shown(): {
    page: { path: string; text: string };
    words: string;
    options: string[];
    text: string;
  }[] {
    const groups = new Set([...commands.keys()].filter((w) => w.includes(" ")).map((w) => w.split(" ")[0]));
    const out = [];
    for (const page of pages())
      for (const code of codeOf(page.text))
        for (const m of code.matchAll(/(?:^|[\s(=-])hostkeeper ([a-z][a-z-]*)((?: [^\s|;&)`]+)*)/g)) {
          const [first, ...rest] = [m[1] as string, ...(m[2] ?? "").trim().split(" ").filter(Boolean)];
          const words = groups.has(first) ? `${first} ${rest[0] ?? ""}`.trim() : first;
          const options = rest
            .filter((a) => a.startsWith("--"))
            .map((a) => a.slice(2).split("=")[0] as string);
          out.push({ page, words, options, text: m[0].trim() });
        }
    return out;
  }

  test("every command the pages show exists, with the options they give it", () => {
    const all = shown();
    assert.ok(
      all.length >= 10,
      `only ${all.length} commands found in the pages' code: is the pattern still right?`,
    );
    const wrong: string[] = [];
    for (const s of all) {
      const options = commands.get(s.words);
      if (!options) wrong.push(`${where(s.page, s.text)}: \`${s.text}\`: no command "${s.words}"`);
      else
        for (const o of s.options)
          if (!options.has(o) && o !== "version")
            wrong.push(`${where(s.page, s.text)}: \`${s.text}\`: "${s.words}" has no option --${o}`);
    }
    assert.deepEqual(wrong, [], "fix the page, or the CLI (src/cli/args.ts, src/cli/main.ts)");
  });

  test("every command is documented on the CLI page, with each of its own options", () => {
    const page = readFileSync(join(root, "docs/cli.md"), "utf8");
    const shared = new Set(["help", "json", "timeout"]);
    const missing: string[] = [];
    for (const [words, options] of commands) {
      if (!page.includes(`hostkeeper ${words}`)) missing.push(`hostkeeper ${words}`);
      for (const o of options)
        if (!shared.has(o) && !page.includes(`--${o}`)) missing.push(`${words} --${o}`);
    }
    assert.deepEqual(missing, [], "document these in docs/cli.md");
  });
});

describe("endpoints", () => {
  /** `METHOD /path` with every path parameter written `{}`, whether `:name` (Fastify) or `{name}` (docs). */
  const key = (method: string, path: string) =>
    `${method} ${path.replace(/:[A-Za-z_]+|\{[^}]*\}/g, "{}").replace(/\/$/, "") || "/"}`;
  let registered: Set<string>;
  before(async () => {
    registered = new Set(
      (await agent()).routes
        // HEAD is Fastify's own beside each GET; the pages name the GET.
        .filter((r) => r.method !== "HEAD")
        .map((r) => key(r.method, r.url)),
    );
  });

  function named(): { page: { path: string; text: string }; endpoint: string; text: string }[] {
    const out = [];
    for (const page of pages())
      for (const m of page.text.matchAll(
        /\b(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) (\/[A-Za-z0-9_{}.:/-]*)/g,
      )) {
        const path = (m[2] as string).replace(/[.:]+$/, "");
        out.push({ page, endpoint: key(m[1] as string, path), text: m[0] });
      }
    return out;
  }

  test("every endpoint the pages name is one the agent registers", () => {
    assert.ok(registered.size >= 20, `only ${registered.size} routes registered`);
    const unknown = named()
      .filter((n) => !registered.has(n.endpoint))
      .map((n) => `${where(n.page, n.text)}: ${n.text}`);
    assert.deepEqual([...new Set(unknown)], [], "the agent registers no such route: fix the page");
  });

  test("every endpoint the agent registers is documented on some page", () => {
    const documented = new Set(named().map((n) => n.endpoint));
    const missing = [...registered].filter((e) => !documented.has(e)).sort();
    assert.deepEqual(missing, [], "document these on the page of their area (docs/api/), as METHOD /path");
  });
});

describe("links", () => {
  /** GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens, repeats numbered. */
  function anchors(text: string): Set<string> {
    const out = new Set<string>();
    const counts = new Map<string, number>();
    const prose = text.replace(/^```[\s\S]*?^```/gm, "");
    for (const m of prose.matchAll(/^#{1,6} +(.+?) *#* *$/gm)) {
      const plain = (m[1] as string).replace(/\[([^\]]*)\]\([^)]*\)/g, "$1").replace(/[`*]/g, "");
      const slug = plain
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, "")
        .replace(/\s/g, "-");
      const n = counts.get(slug) ?? 0;
      counts.set(slug, n + 1);
      out.add(n === 0 ? slug : `${slug}-${n}`);
    }
    return out;
  }

  test("every relative link between the pages resolves, anchors included", () => {
    const all = [...pages(), { path: CHANGELOG, text: readFileSync(join(root, CHANGELOG), "utf8") }];
    const broken: string[] = [];
    for (const page of all) {
      const prose = page.text.replace(/^```[\s\S]*?^```/gm, "").replace(/`[^`]*`/g, "");
      for (const m of prose.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1] as string;
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
        const [file = "", anchor] = target.split("#");
        const path = file === "" ? page.path : relative(root, join(root, dirname(page.path), file));
        if (!existsSync(join(root, path))) {
          broken.push(`${where(page, target)}: ${target} (no file ${path})`);
          continue;
        }
        if (anchor !== undefined && path.endsWith(".md")) {
          const text = path === page.path ? page.text : readFileSync(join(root, path), "utf8");
          if (!anchors(text).has(anchor))
            broken.push(`${where(page, target)}: ${target} (no heading #${anchor} in ${path})`);
        }
      }
    }
    assert.deepEqual(broken, [], "fix these links");
  });
});

test("README.md is a short introduction: at most 250 lines", () => {
  const lines = readFileSync(join(root, "README.md"), "utf8").split("\n").length - 1;
  assert.ok(lines <= 250, `README.md has ${lines} lines: move detail to a page under docs/ and link to it`);
});

test("docs/openapi.json is the document the agent serves", async () => {
  const served = (await agent()).openapi;
  const committed = readFileSync(join(root, OPENAPI_DOC), "utf8");
  if (committed === served) return;
  const a = committed.split("\n");
  const b = served.split("\n");
  const line = a.findIndex((l, i) => l !== b[i]);
  assert.fail(
    `${OPENAPI_DOC} differs from the document the agent serves (first at line ${line + 1}: ${JSON.stringify(a[line])} against ${JSON.stringify(b[line])}): run \`npm run build && npm run docs:openapi\` and commit it`,
  );
});

test("the code points readers at docs/ pages, not at README sections that moved there", () => {
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(join(root, dir)).sort()) {
      const path = join(dir, name);
      if (statSync(join(root, path)).isDirectory()) walk(path);
      else if (name.endsWith(".ts"))
        readFileSync(join(root, path), "utf8")
          .split("\n")
          .forEach((line, i) => {
            if (/\bREADME\b/.test(line)) found.push(`${path}:${i + 1}`);
          });
    }
  };
  for (const dir of ["src", "bench", "scripts"]) walk(dir);
  assert.deepEqual(found, [], "name the docs/ page (and its section) that says it");
});
