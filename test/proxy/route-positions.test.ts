import assert from "node:assert/strict";
import { test } from "node:test";
import type { RouteJson } from "../../src/caddy/routes/plan.js";
import { RoutePositions } from "../../src/caddy/routes/route-positions.js";

const routes = (...ids: (string | undefined)[]): RouteJson[] =>
  ids.map((id) => (id === undefined ? { handle: [] } : { "@id": id, handle: [] }) as RouteJson);

test("each id's position, the first of two routes holding it first, none for an id no route holds", () => {
  const p = RoutePositions.of(routes("a.test", "b.test", undefined, "a.test"));
  assert.deepEqual(p.of("a.test"), [0, 3]);
  assert.deepEqual(p.of("b.test"), [1]);
  assert.deepEqual(p.of("c.test"), []);
  assert.deepEqual(RoutePositions.none().of("a.test"), []);
});

test("a removed route moves the ones after it up; an inserted one moves the ones from its place down", () => {
  const p = RoutePositions.of(routes("a.test", "b.test", "c.test"));
  p.removeAt(0);
  assert.deepEqual([p.of("a.test"), p.of("b.test"), p.of("c.test")], [[], [0], [1]]);
  p.insertAt(1, "x.test");
  assert.deepEqual([p.of("b.test"), p.of("x.test"), p.of("c.test")], [[0], [1], [2]]);
  p.insertAt(3, "y.test");
  assert.deepEqual(p.of("y.test"), [3]);
  p.setAt(0, "z.test");
  assert.deepEqual([p.of("b.test"), p.of("z.test")], [[], [0]]);
});

test("inserts past the first allocation keep every position", () => {
  const p = RoutePositions.none();
  for (let i = 0; i < 100; i++) p.insertAt(0, `r${i}.test`);
  for (let i = 0; i < 100; i++) assert.deepEqual(p.of(`r${i}.test`), [99 - i]);
});

test("a change at a position that does not exist drops every hint rather than keep wrong ones", () => {
  for (const change of [
    (p: RoutePositions) => p.removeAt(5),
    (p: RoutePositions) => p.insertAt(4, "x.test"),
    (p: RoutePositions) => p.setAt(-1, "x.test"),
  ]) {
    const p = RoutePositions.of(routes("a.test", "b.test"));
    change(p);
    assert.deepEqual([p.of("a.test"), p.of("b.test")], [[], []]);
  }
});
