/**
 * Reading a Prometheus text page (Caddy's admin `/metrics`) in the tests and the benchmark. Never shipped.
 */

/** The sum of the samples of `name` whose labels include every `labels` pair; NaN when there is none. */
export function metricSample(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = Number.NaN;
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name} `) && !line.startsWith(`${name}{`)) continue;
    const labelText = line.startsWith(`${name}{`) ? line.slice(name.length + 1, line.indexOf("}")) : "";
    if (!Object.entries(labels).every(([k, v]) => labelText.includes(`${k}="${v}"`))) continue;
    sum = (Number.isNaN(sum) ? 0 : sum) + Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return sum;
}
