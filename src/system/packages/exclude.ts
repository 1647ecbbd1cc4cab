/*
 * `exclude` of an apply or a schedule: package name patterns (shell globs: `*`, `?`, `[...]`) kept out of
 * that run, on top of the holds. Both package managers take them as they are: apt in a pin's `Package` line
 * (apt_preferences(5) reads globs there), dnf as `--exclude`; the agent matches them the same way to say
 * which updates a run kept out.
 */

/** A pattern the API takes: the characters of package names and the glob's own, nothing apt or dnf reads otherwise. */
export const EXCLUDE_PATTERN = "^[A-Za-z0-9.+_*?\\[\\]-]{1,128}$";
/** Patterns one run takes at most. */
export const MAX_EXCLUDES = 64;

/** A matcher for package names: whether any of `patterns` takes a name whole. */
export function excludedBy(patterns: readonly string[]): (name: string) => boolean {
  if (patterns.length === 0) return () => false;
  const res = patterns.map((p) => new RegExp(`^${globSource(p)}$`));
  return (name) => res.some((re) => re.test(name));
}

/** The regular expression of one glob: `*` any run, `?` one character, `[...]` a class, the rest literal. */
function globSource(glob: string): string {
  let out = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i] as string;
    if (c === "*") out += ".*";
    else if (c === "?") out += ".";
    else if (c === "[") {
      const end = glob.indexOf("]", i + 2);
      if (end === -1) out += "\\[";
      else {
        const body = glob.slice(i + 1, end).replace(/\\/g, "\\\\");
        out += `[${body.startsWith("!") ? `^${body.slice(1)}` : body}]`;
        i = end;
      }
    } else out += c.replace(/[.+^${}()|\\\]-]/g, "\\$&");
  }
  return out;
}
