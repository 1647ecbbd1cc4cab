import assert from "node:assert/strict";
import { type TestContext, test } from "node:test";
import { CaddyAdmin, CaddyUnavailableError, JsonPieces } from "../../src/caddy/admin.js";
import { goJson, goJsonPieces } from "../../src/caddy/routes/etag.js";
import { startCaddy } from "../helpers/caddy.js";

// A write sent right behind a config change can meet Caddy restarting its admin server: the connection is
// reset. CaddyAdmin.write sends it again only when it provably did not land. The reset itself cannot be
// caused on demand (it is a race with Caddy's listener hand-over): a mocked first attempt stands in for it.

const ROUTES = "/config/apps/http/servers/srv0/routes";
const route = (id: string) => ({
  "@id": id,
  match: [{ host: [id] }],
  handle: [{ handler: "static_response" }],
});

const reset = (syscall?: string) =>
  new CaddyUnavailableError("Caddy's admin API is unreachable: ECONNRESET", {
    cause: Object.assign(new Error("read ECONNRESET"), {
      code: "ECONNRESET",
      ...(syscall ? { syscall } : {}),
    }),
  });

/** Makes the first write attempt fail with `err`, after sending it when `send` says so. */
async function failFirstWrite(t: TestContext, err: Error, send: boolean) {
  const caddy = await startCaddy(t);
  const admin = new CaddyAdmin({ kind: "tcp", url: new URL(caddy.adminUrl) }, 10_000);
  const raw = admin.raw.bind(admin);
  let writes = 0;
  t.mock.method(admin, "raw", async (...args: Parameters<CaddyAdmin["raw"]>) => {
    if (args[0] === "GET") return raw(...args);
    writes++;
    if (writes > 1) return raw(...args);
    if (send) await raw(...args);
    throw err;
  });
  const ids = async () =>
    (JSON.parse((await caddy.admin.read(ROUTES)).text) as { "@id": string }[] | null)?.map((r) => r["@id"]) ??
    [];
  return { caddy, admin, ids, writes: () => writes };
}

test("a write with If-Match reset before Caddy took it is sent again: the value it names kept its ETag", async (t) => {
  const { caddy, admin, ids, writes } = await failFirstWrite(t, reset("read"), false);
  const { etag } = await caddy.admin.read(ROUTES);
  await admin.write("POST", ROUTES, route("a.test"), etag);
  assert.equal(writes(), 2);
  assert.deepEqual(await ids(), ["a.test"]);
});

test("a write with If-Match reset after Caddy took it is not sent again: the error is the caller's", async (t) => {
  const { caddy, admin, ids, writes } = await failFirstWrite(t, reset("read"), true);
  const { etag } = await caddy.admin.read(ROUTES);
  await assert.rejects(admin.write("POST", ROUTES, route("a.test"), etag), CaddyUnavailableError);
  assert.equal(writes(), 1);
  assert.deepEqual(await ids(), ["a.test"]);
});

test("a write without If-Match is sent again only when its connection was never made", async (t) => {
  const never = await failFirstWrite(t, reset("connect"), false);
  await never.admin.write("POST", ROUTES, route("b.test"));
  assert.equal(never.writes(), 2);
  assert.deepEqual(await never.ids(), ["b.test"]);

  const unknown = await failFirstWrite(t, reset("read"), true);
  await assert.rejects(unknown.admin.write("POST", ROUTES, route("c.test")), CaddyUnavailableError);
  assert.equal(unknown.writes(), 1);
  assert.deepEqual(await unknown.ids(), ["c.test"]);
});

/** Routes whose text spans several of a body's 64 KiB chunks, with text of 2, 3 and 4 UTF-8 bytes a character. */
const manyRoutes = (n: number) =>
  Array.from({ length: n }, (_, i) => ({
    ...route(`r${i}.test`),
    handle: [{ handler: "static_response", body: `ünïcødé ✓ 𝄞 <&> ${"x".repeat(i % 50)}` }],
  }));

test("a body given in pieces reaches Caddy whole, and is given again to a write sent again", async (t) => {
  const { caddy, admin, writes } = await failFirstWrite(t, reset("read"), false);
  const routes = manyRoutes(2000);
  let given = 0;
  const body = new JsonPieces(() => {
    given++;
    return goJsonPieces(routes);
  });
  const { etag } = await caddy.admin.read(ROUTES);
  await admin.write("PATCH", ROUTES, body, etag);
  assert.equal(writes(), 2, "sent again after the reset");
  assert.ok(given >= 2, "the pieces were walked for each attempt");
  const held = await caddy.admin.read(ROUTES);
  assert.ok(held.text.length > 4 * 64 * 1024, `a body of several chunks (${held.text.length})`);
  assert.equal(held.text, goJson(routes));
});
