import assert from "node:assert/strict";
import type { TestApp } from "../helpers/app.js";

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const NAME = "[a-zA-Z_:][a-zA-Z0-9_:]*";
const LABEL = `[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\\\\n]|\\\\[\\\\"n])*"`;
const SAMPLE = new RegExp(`^(${NAME})(?:\\{((?:${LABEL})(?:,${LABEL})*,?)?\\})? (\\S+)(?: -?\\d+)?$`);
const VALUE = /^(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)$/i;
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"]);

/**
 * Parses the Prometheus text exposition format (0.0.4) strictly: every line is a HELP, a TYPE or a sample
 * of a declared family, so a malformed line fails the test with that line.
 */
export function parseExposition(text: string): { samples: Sample[]; types: Map<string, string> } {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  assert.ok(text.endsWith("\n"), "the exposition ends with a newline");
  for (const line of text.slice(0, -1).split("\n")) {
    // The format allows empty lines (prom-client puts one between families).
    if (line === "") continue;
    if (line.startsWith("# HELP ")) {
      assert.match(line, new RegExp(`^# HELP ${NAME} .*$`), line);
      continue;
    }
    if (line.startsWith("# TYPE ")) {
      const [, , name, type] = line.split(" ");
      assert.ok(name && type && TYPES.has(type), `a TYPE line names a family and a type: ${line}`);
      assert.ok(!types.has(name), `${name} is declared once`);
      types.set(name, type);
      continue;
    }
    const m = SAMPLE.exec(line);
    assert.ok(m?.[1] && m[3] !== undefined, `a sample line: ${JSON.stringify(line)}`);
    assert.match(m[3], VALUE, line);
    const name = m[1];
    const family = [name, name.replace(/_(bucket|sum|count)$/, "")].find((n) => types.has(n));
    assert.ok(family, `${name} belongs to a declared family`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1] as string] = (l[2] as string).replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    samples.push({ name, labels, value: Number(m[3].replace(/Inf$/, "Infinity")) });
  }
  return { samples, types };
}

/** The agent's metrics now, parsed; asserts the answer is the exposition format. */
export async function scrape(h: Pick<TestApp, "call">): Promise<Sample[]> {
  const r = await h.call({ method: "GET", url: "/metrics" });
  assert.equal(r.statusCode, 200, r.body);
  assert.match(String(r.headers["content-type"]), /^text\/plain; version=0\.0\.4/);
  return parseExposition(r.body).samples;
}

/** The value of one series (0 when it is absent: a labelled counter appears with its first increment). */
export function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const found = samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  return found.reduce((sum, s) => sum + s.value, 0);
}
