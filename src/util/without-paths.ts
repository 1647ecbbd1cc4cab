/**
 * A text from outside the agent (Caddy's error messages name the files it failed to load) with absolute
 * file paths and unix socket addresses replaced, for a problem detail; the log keeps the original.
 */
export function withoutPaths(text: string): string {
  return text.replace(/unix:[^\s"',;:)]+/g, "[socket]").replace(/(?<![\w:/.~-])\/[^\s"',;:)]+/g, "[path]");
}
