import assert from "node:assert/strict";
import http from "node:http";
import { join } from "node:path";
import { test } from "node:test";
import { lastLines } from "../../src/access-logs/files.js";
import { proxyExchange } from "../helpers/http.js";
import { waitFor } from "../helpers/wait.js";
import { accessLogSetup, configWrites, cookieUpstream, write } from "./support.js";

test("a burst of changes to routes that log costs one bringing in line; routes without a log cost nothing more", async (t) => {
  const s = await accessLogSetup(t);
  const port = await cookieUpstream(t);
  const svc = s.app.services.routes;
  /** Config writes (reloads) of a first change alone and nine that queue behind it: one batch. */
  const burst = async (first: () => Promise<unknown>, rest: (() => Promise<unknown>)[]) => {
    const before = await configWrites(s.caddy);
    await Promise.all([first(), ...rest.map((c) => c())]);
    await s.writer.whenIdle();
    return (await configWrites(s.caddy)) - before;
  };
  const nine = (prefix: string, extra: Record<string, unknown>) =>
    Array.from({ length: 9 }, (_, i) => () => svc.create(write(`${prefix}${i}.log.test`, port, extra)));

  const loggingBefore = (await s.caddy.admin.read("/config/logging")).text;
  const plain = await burst(() => svc.create(write("first.log.test", port)), nine("plain", {}));
  assert.equal(plain, 2, "the first change alone, then the nine as one batch");
  assert.equal(
    (await s.caddy.admin.read("/config/logging")).text,
    loggingBefore,
    "no log config for routes without a log",
  );
  assert.equal((await s.caddy.admin.read("/config/apps/http/servers/srv0/logs")).text.trim(), "null");

  const logged = await burst(
    () => svc.create(write("second.log.test", port)),
    nine("logged", { access_log: true }),
  );
  assert.equal(logged, plain + 2, "the logs and the host map, each once for the batch");

  const removed = await burst(
    () => svc.create(write("third.log.test", port)),
    Array.from({ length: 9 }, (_, i) => () => svc.delete(`logged${i}.log.test`, undefined)),
  );
  assert.equal(removed, plain + 2, "the logs and the host map taken away once, after the batch");
  assert.equal((await s.caddy.admin.read("/config/apps/http/servers/srv0/logs")).text.trim(), "null");
});

test("no request a logging route answers is missing from its log while the route and others change", async (t) => {
  const s = await accessLogSetup(t);
  const port = await cookieUpstream(t);
  const route = (extra: Record<string, unknown> = {}) =>
    write("busy.log.test", port, { access_log: true, ...extra });
  await s.call({ method: "POST", url: "/v1/proxy/routes", payload: route() });
  const agent = new http.Agent({ keepAlive: false });
  t.after(() => agent.destroy());
  let answered = 0;
  let stop = false;
  const loop = (async () => {
    for (let i = 0; !stop && i < 5000; i++) {
      // A request a reload resets is answered by nobody: only answered ones must be in the log.
      const r = await proxyExchange(s.caddy.httpPort, "busy.log.test", { path: `/n${i}` }).catch(
        () => undefined,
      );
      if (r?.status === 200) answered++;
    }
  })();
  // The route changes (its hosts too), others come and go, each a reload under the loop's requests.
  // A host or route that starts logging does so from the change's answer on: a request sent right after it
  // is in the log.
  let redirects = 0;
  for (let i = 0; i < 4; i++) {
    const host = `r${i}.busy.log.test`;
    await s.call({
      method: "PUT",
      url: "/v1/proxy/routes/busy.log.test",
      payload: route({ redirect_from: [host] }),
    });
    if ((await s.send(host, `/redirect${i}`)).status === 308) redirects++;
    const other = `other${i}.log.test`;
    await s.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: write(other, port, { access_log: true }),
    });
    assert.equal((await s.send(other, "/first")).status, 200);
    await waitFor(`${other}'s first request`, async () =>
      (await lastLines(join(s.dir, `${other}.log`), 5)).length === 1 ? true : undefined,
    );
    await s.call({ method: "DELETE", url: `/v1/proxy/routes/${other}` });
  }
  stop = true;
  await loop;
  assert.ok(answered > 0);
  assert.equal(redirects, 4);
  const file = join(s.dir, "busy.log.test.log");
  const want = answered + redirects;
  await waitFor(`${want} entries`, async () =>
    (await lastLines(file, 10_000)).length === want ? true : undefined,
  );
});
