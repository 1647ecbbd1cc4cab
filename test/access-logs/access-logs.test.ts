import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync, utimesSync, writeFileSync } from "node:fs";
import http from "node:http";
import { join } from "node:path";
import { test } from "node:test";
import { gunzipSync } from "node:zlib";
import { lastLines } from "../../src/access-logs/files.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { waitFor } from "../helpers/wait.js";
import { accessLogSetup, cookieUpstream, type Entry, write } from "./support.js";

const SECRETS = [
  "Basic c2VjcmV0OnNlY3JldA==",
  "c=cookie-secret",
  "Basic cHJveHk6c2VjcmV0",
  "upstream-secret",
];
const CREDENTIALS = {
  authorization: SECRETS[0] as string,
  cookie: SECRETS[1] as string,
  "proxy-authorization": SECRETS[2] as string,
};

test("a route's log holds the requests of its own hosts only, credentials REDACTED, and is tailed through the API", async (t) => {
  const s = await accessLogSetup(t);
  const port = await cookieUpstream(t);
  const created = await s.call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: write("a.log.test", port, { access_log: true, redirect_from: ["www.a.log.test"] }),
  });
  assert.equal(created.statusCode, 201, created.body);
  await s.call({ method: "POST", url: "/v1/proxy/routes", payload: write("b.log.test", port) });
  const file = join(s.dir, "a.log.test.log");

  // The flag reads back from the route Caddy holds; a route without it has none.
  const asked = await s.call({ method: "GET", url: "/v1/proxy/routes/a.log.test/request" });
  assert.equal(asked.json().access_log, true);
  assert.equal(
    "access_log" in (await s.call({ method: "GET", url: "/v1/proxy/routes/b.log.test/request" })).json(),
    false,
  );

  assert.equal((await s.send("a.log.test", "/one", CREDENTIALS)).status, 200);
  assert.equal((await s.send("b.log.test", "/other-route")).status, 200);
  assert.equal((await s.send("unrouted.log.test", "/no-route")).status, 200);
  assert.equal((await s.send("www.a.log.test", "/redirected")).status, 308);
  assert.equal((await s.send("A.LOG.TEST", "/upper-case")).status, 200);
  assert.equal((await s.send("a.log.test", "/two")).status, 200);

  const entries = await waitFor("the route's six... four entries", async () => {
    const r = await s.tail("a.log.test");
    return r.status === 200 && (r.body as unknown[]).length === 4 ? (r.body as Entry[]) : undefined;
  });
  assert.deepEqual(
    entries.map((e) => `${e.request.host} ${e.request.uri} ${e.status}`),
    [
      "a.log.test /one 200",
      "www.a.log.test /redirected 308",
      "A.LOG.TEST /upper-case 200",
      "a.log.test /two 200",
    ],
    "the route's hosts only, newest last",
  );
  const first = entries[0] as Entry;
  for (const h of ["Authorization", "Cookie", "Proxy-Authorization"])
    assert.deepEqual(first.request.headers[h], ["REDACTED"], h);
  assert.deepEqual(first.resp_headers["Set-Cookie"], ["REDACTED"]);
  const text = readFileSync(file, "utf8");
  for (const secret of SECRETS) assert.equal(text.includes(secret), false, `${secret} is not in the file`);
  assert.equal(text.includes("other-route") || text.includes("no-route"), false);

  // Bounds and the newest N, newest last.
  const two = await s.tail("a.log.test", "?lines=2");
  assert.deepEqual(
    (two.body as Entry[]).map((e) => e.request.uri),
    ["/upper-case", "/two"],
  );
  for (const bad of ["0", "10001", "x", "-1"])
    assert.equal((await s.tail("a.log.test", `?lines=${bad}`)).status, 400, `lines=${bad}`);
  assert.equal(((await s.tail("a.log.test", "?lines=10000")).body as unknown[]).length, 4);
  const none = await s.tail("b.log.test");
  assert.equal(none.status, 404);
  assert.equal((none.body as { code: string }).code, "access_log_not_found");
  assert.equal(((await s.tail("nowhere.log.test")).body as { code: string }).code, "route_not_found");

  // What Caddy holds besides the route: no access entry in its default log, only the route's hosts recorded.
  const logging = (await s.config("/config/logging/logs")) as Record<
    string,
    { exclude?: string[]; include?: string[] }
  >;
  assert.deepEqual(logging.default?.exclude, ["http.log.access"]);
  const own = Object.entries(logging).filter(([k]) => k.startsWith("hostkeeper_access_"));
  assert.equal(own.length, 1);
  const serverLogs = (await s.config("/config/apps/http/servers/srv0/logs")) as {
    logger_names: Record<string, string[]>;
    skip_unmapped_hosts: boolean;
    should_log_credentials?: boolean;
  };
  assert.deepEqual(Object.keys(serverLogs.logger_names).sort(), ["a.log.test", "www.a.log.test"]);
  assert.equal(serverLogs.skip_unmapped_hosts, true);
  assert.equal(serverLogs.should_log_credentials, undefined);
});

test("a wildcard route's log takes no request of a host that another route serves without a log", async (t) => {
  const s = await accessLogSetup(t);
  const port = await cookieUpstream(t);
  const wild = await s.call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: write("*.w.log.test", port, { access_log: true }),
  });
  assert.equal(wild.statusCode, 201, wild.body);
  await s.call({ method: "POST", url: "/v1/proxy/routes", payload: write("plain.w.log.test", port) });
  for (const host of ["plain.w.log.test", "PLAIN.w.log.test", "x.w.log.test"]) await s.send(host, `/${host}`);
  const entries = await waitFor("the wildcard's entry", async () => {
    const r = await s.tail("*.w.log.test");
    return (r.body as unknown[]).length >= 1 ? (r.body as Entry[]) : undefined;
  });
  // Caddy writes after answering: give a stray entry the time of another request through the same Caddy.
  await s.send("x.w.log.test", "/last");
  await waitFor(
    "the last entry",
    async () => ((await s.tail("*.w.log.test")).body as unknown[]).length === 2 || undefined,
  );
  const uris = ((await s.tail("*.w.log.test")).body as Entry[]).map((e) => e.request.uri);
  assert.deepEqual(uris, ["/x.w.log.test", "/last"], JSON.stringify(entries));
  assert.ok(readdirSync(s.dir).includes("%2A.w.log.test.log"));
});

test("a log stops when its route is replaced without access_log or deleted, and its files go after KEEP_DAYS", async (t) => {
  const s = await accessLogSetup(t, { HOSTKEEPER_ACCESS_LOG_KEEP_DAYS: "3" });
  const port = await cookieUpstream(t);
  const logged = write("r.log.test", port, { access_log: true });
  assert.equal((await s.call({ method: "POST", url: "/v1/proxy/routes", payload: logged })).statusCode, 201);
  await s.call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: write("keep.log.test", port, { access_log: true }),
  });
  await s.send("r.log.test", "/before");
  await s.send("keep.log.test", "/kept");
  const file = join(s.dir, "r.log.test.log");
  await waitFor("the first entry", async () => ((await lastLines(file, 5)).length === 1 ? true : undefined));

  const replaced = await s.call({
    method: "PUT",
    url: "/v1/proxy/routes/r.log.test",
    payload: write("r.log.test", port),
  });
  assert.equal(replaced.statusCode, 200, replaced.body);
  await s.writer.whenIdle();
  await s.send("r.log.test", "/after-replace");
  await s.send("keep.log.test", "/kept-2");
  await waitFor("the kept route's entry", async () =>
    (await lastLines(join(s.dir, "keep.log.test.log"), 5)).length === 2 ? true : undefined,
  );
  assert.deepEqual((await lastLines(file, 5)).length, 1, "nothing written after the replace");
  assert.equal(((await s.tail("r.log.test")).body as { code: string }).code, "access_log_not_found");
  let names = Object.keys((await s.config("/config/logging/logs")) as object);
  assert.equal(names.filter((n) => n.startsWith("hostkeeper_access_")).length, 1, "only keep.log.test's log");
  let hosts = (await s.config("/config/apps/http/servers/srv0/logs")) as { logger_names: object };
  assert.deepEqual(Object.keys(hosts.logger_names), ["keep.log.test"]);

  // Logging again, then deleted.
  await s.call({ method: "PUT", url: "/v1/proxy/routes/r.log.test", payload: logged });
  await s.send("r.log.test", "/again");
  await waitFor("the entry after logging again", async () =>
    (await lastLines(file, 5)).length === 2 ? true : undefined,
  );
  assert.equal((await s.call({ method: "DELETE", url: "/v1/proxy/routes/r.log.test" })).statusCode, 204);
  await s.writer.whenIdle();
  names = Object.keys((await s.config("/config/logging/logs")) as object);
  assert.equal(names.filter((n) => n.startsWith("hostkeeper_access_")).length, 1);
  hosts = (await s.config("/config/apps/http/servers/srv0/logs")) as { logger_names: object };
  assert.deepEqual(Object.keys(hosts.logger_names), ["keep.log.test"]);
  await s.send("r.log.test", "/gone");

  // The deleted route's files (a rolled one beside it) stay while fresh, and go once older than 3 days;
  // the file of a route that still logs never goes, however old, nor a file that is no route's.
  const rolled = join(s.dir, "r.log.test-2026-01-02T03-04-05.678.log.gz");
  const other = join(s.dir, "notes.txt");
  writeFileSync(rolled, "");
  writeFileSync(other, "");
  await s.app.services.accessLogs.sweep();
  assert.deepEqual(readdirSync(s.dir).sort(), [
    "keep.log.test.log",
    "notes.txt",
    "r.log.test-2026-01-02T03-04-05.678.log.gz",
    "r.log.test.log",
  ]);
  const old = new Date(Date.now() - 4 * 86_400_000);
  for (const f of [file, rolled, other, join(s.dir, "keep.log.test.log")]) utimesSync(f, old, old);
  await s.app.services.accessLogs.sweep();
  assert.deepEqual(readdirSync(s.dir).sort(), ["keep.log.test.log", "notes.txt"]);
});

test("Caddy rolls a route's log at its size and keeps HOSTKEEPER_ACCESS_LOG_KEEP rolled files; the tail reads into the rolled ones", async (t) => {
  const s = await accessLogSetup(t, { HOSTKEEPER_ACCESS_LOG_ROLL_MB: "1", HOSTKEEPER_ACCESS_LOG_KEEP: "2" });
  const port = await cookieUpstream(t);
  await s.call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: write("roll.log.test", port, { access_log: true }),
  });
  // About 8 KiB a line: 1 MiB is about 130 requests; 600 roll it four times or more.
  const pad = { "x-pad": "p".repeat(8000) };
  const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
  t.after(() => agent.destroy());
  for (let i = 0; i < 600; i += 20)
    await Promise.all(
      Array.from({ length: 20 }, (_, j) => s.send("roll.log.test", `/r${i + j}`, pad, agent)),
    );
  await s.send("roll.log.test", "/last");
  const rolledFiles = () => readdirSync(s.dir).filter((n) => n.startsWith("roll.log.test-"));
  const rolled = await waitFor("rolled files down to 2", () => {
    const r = rolledFiles();
    return r.length === 2 && r.every((n) => n.endsWith(".log.gz")) ? r : undefined;
  });
  assert.equal(rolled.length, 2);
  const current = statSync(join(s.dir, "roll.log.test.log")).size;
  assert.ok(current <= 1024 * 1024 + 9000, `the current file is under the roll size: ${current}`);
  const tail = await waitFor("the last entry", async () => {
    const r = (await s.tail("roll.log.test", "?lines=5")).body as Entry[];
    return r.at(-1)?.request.uri === "/last" ? r : undefined;
  });
  assert.equal(tail.length, 5);
  // The current file holds under 150 lines of about 8 KiB: 200 reach into the newest rolled (gzipped) file,
  // each request once, in the files' order, ending with the last.
  const currentLines = readFileSync(join(s.dir, "roll.log.test.log"), "utf8").trim().split("\n").length;
  assert.ok(currentLines < 200, `the current file holds ${currentLines} lines`);
  const res = await s.tail("roll.log.test", "?lines=200");
  const across = res.body as Entry[];
  assert.equal(across.length, 200);
  assert.equal(res.truncated, undefined);
  assert.equal(across.at(-1)?.request.uri, "/last");
  assert.equal(new Set(across.map((e) => e.request.uri)).size, 200, "no line twice");
  // In the files' order: the newest rolled file (gunzipped here) then the current one, their last 200 lines.
  const newest = rolledFiles().sort().at(-1) as string;
  const inFiles = [
    ...gunzipSync(readFileSync(join(s.dir, newest)))
      .toString("utf8")
      .trim()
      .split("\n"),
    ...readFileSync(join(s.dir, "roll.log.test.log"), "utf8").trim().split("\n"),
  ].map((l) => (JSON.parse(l) as Entry).request.uri);
  assert.deepEqual(
    across.map((e) => e.request.uri),
    inFiles.slice(-200),
  );
  // All of them: more than 2 MiB of lines, so the answer is cut to the newest that fit, and says so.
  const all = await s.tail("roll.log.test", "?lines=10000");
  const entries = all.body as Entry[];
  assert.ok(entries.length > 200 && entries.length < 300, `${entries.length} entries within 2 MiB`);
  assert.equal(all.truncated, "true");
  assert.equal(entries.at(-1)?.request.uri, "/last");
});

test("an agent starting on a Caddy whose access log config went astray brings it in line with the routes", async (t) => {
  const s = await accessLogSetup(t);
  const port = await cookieUpstream(t);
  await s.call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: write("adopt.log.test", port, { access_log: true }),
  });
  // By hand: the route's log and host map gone, a log of a route that does not exist, the default log's
  // exclude gone.
  const logs = (await s.config("/config/logging/logs")) as Record<string, unknown>;
  const [own] = Object.keys(logs).filter((k) => k.startsWith("hostkeeper_access_"));
  // Each with its path's ETag: a write right behind another can meet Caddy restarting its admin server, and
  // only a write whose ETag shows it did not land is sent again (one sent without failed the suite once).
  const byHand = async (method: "POST" | "DELETE", path: string, body?: unknown) =>
    s.caddy.admin.write(method, path, body, (await s.caddy.admin.read(path)).etag);
  await byHand("POST", "/config/logging/logs", {
    hostkeeper_access_0000000000000000: { writer: { output: "discard" } },
  });
  await byHand("DELETE", "/config/apps/http/servers/srv0/logs");
  const next = await buildTestApp(t, {
    HOSTKEEPER_CADDY_ADMIN: s.caddy.adminUrl,
    HOSTKEEPER_ACCESS_LOG_DIR: s.dir,
  });
  assert.ok(next);
  const now = (await s.config("/config/logging/logs")) as Record<string, { exclude?: string[] }>;
  assert.deepEqual(Object.keys(now).sort(), ["default", own].sort());
  assert.deepEqual(now.default?.exclude, ["http.log.access"]);
  const hosts = (await s.config("/config/apps/http/servers/srv0/logs")) as { logger_names: object };
  assert.deepEqual(Object.keys(hosts.logger_names), ["adopt.log.test"]);
  await s.send("adopt.log.test", "/after-start");
  await waitFor("the entry", async () =>
    (await lastLines(join(s.dir, "adopt.log.test.log"), 5)).length === 1 ? true : undefined,
  );
});

test("a route whose log Caddy refuses is not written, and changes without a log go on", async (t) => {
  // Not even root can make a folder in /proc: Caddy refuses a log there, and keeps its config.
  const s = await accessLogSetup(t, { HOSTKEEPER_ACCESS_LOG_DIR: "/proc/hk-access-logs" });
  const port = await cookieUpstream(t);
  const refused = await s.call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: write("refused.log.test", port, { access_log: true }),
  });
  assert.equal(refused.statusCode, 503, refused.body);
  assert.equal(refused.json().code, "proxy_rejected_change");
  assert.equal((await s.call({ method: "GET", url: "/v1/proxy/routes/refused.log.test" })).statusCode, 404);
  const plain = await s.call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: write("plain.log.test", port),
  });
  assert.equal(plain.statusCode, 201, plain.body);
  assert.equal((await s.caddy.admin.read("/config/logging")).text.trim(), "null", "Caddy kept its config");
});

test("with an external Caddy and no folder for the files, access_log: true is refused", async (t) => {
  const caddy = await startCaddy(t);
  const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  const r = await h.call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: write("nofolder.log.test", 1, { access_log: true }),
  });
  assert.equal(r.statusCode, 400);
  assert.equal(r.json().errors[0].field, "body.access_log");
  assert.equal(
    (
      await h.call({
        method: "POST",
        url: "/v1/proxy/routes",
        payload: write("nofolder.log.test", 1, { access_log: false }),
      })
    ).statusCode,
    201,
  );
});
