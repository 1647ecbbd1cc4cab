/** What the CLI prints: aligned tables and key-value blocks for people, the API's own JSON text for scripts. */

export function print(text: string): void {
  process.stdout.write(text.endsWith("\n") ? text : `${text}\n`);
}

/** Columns aligned by padding; the last column is not padded, so no line ends in spaces. */
export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const all = [headers, ...rows];
  const widths = headers.map((_, i) => Math.max(...all.map((r) => (r[i] ?? "").length)));
  return all
    .map((r) =>
      r
        .map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

/** A block of `key  value` lines, keys aligned. */
export function fields(pairs: readonly (readonly [string, string])[]): string {
  const width = Math.max(0, ...pairs.map(([k]) => k.length));
  return pairs.map(([k, v]) => `${k.padEnd(width)}  ${v}`.trimEnd()).join("\n");
}

/** A value for a table cell: `-` for nothing, so a column never looks shifted. */
export function cell(v: unknown): string {
  if (v === undefined || v === null || v === "") return "-";
  if (typeof v === "boolean") return v ? "yes" : "no";
  return String(v);
}
