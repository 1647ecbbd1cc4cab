import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy, startRefusableCaddy } from "../helpers/caddy.js";
import { startReceiver, startUpstream } from "../helpers/http.js";
import { parseExposition, scrape, value } from "./support.js";

const route = (domain: string, port: number, callback_url?: string) => ({
  domain,
  upstreams: [{ dial: `127.0.0.1:${port}` }],
  ...(callback_url ? { callback_url } : {}),
});

describe("GET /metrics", () => {
  test("answers 401 without the token, and with a wrong one", async (t) => {
    const { app } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1" });
    assert.equal((await app.inject({ method: "GET", url: "/metrics" })).statusCode, 401);
    const wrong = await app.inject({
      method: "GET",
      url: "/metrics",
      headers: { authorization: "Bearer not-the-token" },
    });
    assert.equal(wrong.statusCode, 401);
  });

  test("is the Prometheus text format, every family named hostkeeper_, the process defaults included", async (t) => {
    const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1" });
    const r = await h.call({ method: "GET", url: "/metrics" });
    const { types } = parseExposition(r.body);
    for (const name of types.keys()) assert.ok(name.startsWith("hostkeeper_"), name);
    assert.ok(types.size > 20, `families: ${[...types.keys()]}`);
    for (const [name, type] of [
      ["hostkeeper_process_cpu_seconds_total", "counter"],
      ["hostkeeper_nodejs_heap_size_used_bytes", "gauge"],
      ["hostkeeper_route_changes_total", "counter"],
      ["hostkeeper_route_write_batch_size", "histogram"],
      ["hostkeeper_caddy_admin_request_duration_seconds", "histogram"],
      ["hostkeeper_caddy_admin_errors_total", "counter"],
      ["hostkeeper_caddy_restarts_total", "counter"],
      ["hostkeeper_outbox_events", "gauge"],
      ["hostkeeper_outbox_delivery_attempts_total", "counter"],
      ["hostkeeper_package_operation_duration_seconds", "histogram"],
      ["hostkeeper_operator_updates_total", "counter"],
    ] as const)
      assert.equal(types.get(name), type, name);
    const samples = await scrape(h);
    for (const state of ["pending", "delivered", "dead"])
      assert.equal(value(samples, "hostkeeper_outbox_events", { state }), 0, state);
    assert.equal(value(samples, "hostkeeper_caddy_restarts_total"), 0);
  });

  test("two apps in one process keep their own counts", async (t) => {
    const a = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1" });
    const b = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1" });
    a.app.services.metrics.routeChanges.inc({ operation: "create", outcome: "applied" });
    assert.equal(value(await scrape(a), "hostkeeper_route_changes_total"), 1);
    assert.equal(value(await scrape(b), "hostkeeper_route_changes_total"), 0);
  });
});

describe("metrics of route changes against a real Caddy", () => {
  test("changes count by operation and outcome, and Caddy's admin API latency by method", async (t) => {
    const caddy = await startCaddy(t);
    const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
    const up = await startUpstream(t, "a");
    const created = await h.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: route("m.test", up.port),
    });
    assert.equal(created.statusCode, 201, created.body);
    const replaced = await h.call({
      method: "PUT",
      url: "/v1/proxy/routes/m.test",
      payload: route("m.test", up.port + 1),
    });
    assert.equal(replaced.statusCode, 200, replaced.body);
    assert.equal((await h.call({ method: "DELETE", url: "/v1/proxy/routes/m.test" })).statusCode, 204);

    const s = await scrape(h);
    for (const operation of ["create", "replace", "delete"])
      assert.equal(
        value(s, "hostkeeper_route_changes_total", { operation, outcome: "applied" }),
        1,
        operation,
      );
    assert.equal(value(s, "hostkeeper_route_changes_total"), 3);
    // Each change was read from Caddy and written to it: both methods have answered requests timed.
    assert.ok(
      value(s, "hostkeeper_caddy_admin_request_duration_seconds_count", { method: "GET", outcome: "2xx" }) >
        0,
    );
    const writes = ["POST", "PUT", "PATCH", "DELETE"].map((method) =>
      value(s, "hostkeeper_caddy_admin_request_duration_seconds_count", { method, outcome: "2xx" }),
    );
    assert.ok(writes.reduce((x, y) => x + y) >= 3, `writes: ${writes}`);
    assert.equal(value(s, "hostkeeper_caddy_admin_errors_total"), 0);
  });

  test("the batch size histogram sees concurrent creates taken as one batch", async (t) => {
    const caddy = await startCaddy(t);
    const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
    const up = await startUpstream(t, "a");
    const svc = h.app.services.routes;
    // Called back to back: the first goes to Caddy alone, the other nine wait for it and go together.
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) => svc.create(route(`b${i}.test`, up.port))),
    );
    assert.equal(results.length, 10);
    const s = await scrape(h);
    const count = value(s, "hostkeeper_route_write_batch_size_count");
    assert.equal(value(s, "hostkeeper_route_write_batch_size_sum"), 10, "every change is in one batch");
    assert.ok(count < 10, `fewer batches than changes: ${count}`);
    assert.ok(
      value(s, "hostkeeper_route_write_batch_size_bucket", { le: "1" }) < count,
      "a batch of more than one change",
    );
    assert.equal(value(s, "hostkeeper_route_changes_total", { operation: "create", outcome: "applied" }), 10);
  });

  test("a change Caddy refuses counts as failed, and as an admin API error", async (t) => {
    const { caddy, refuse } = await startRefusableCaddy(t);
    const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
    const up = await startUpstream(t, "a");
    refuse();
    const r = await h.call({ method: "POST", url: "/v1/proxy/routes", payload: route("no.test", up.port) });
    assert.equal(r.statusCode, 503, r.body);
    assert.equal(r.json().code, "proxy_rejected_change");
    const s = await scrape(h);
    assert.equal(value(s, "hostkeeper_route_changes_total", { operation: "create", outcome: "failed" }), 1);
    assert.equal(value(s, "hostkeeper_route_changes_total", { outcome: "applied" }), 0);
    assert.ok(value(s, "hostkeeper_caddy_admin_errors_total", { reason: "status" }) >= 1);
    assert.ok(value(s, "hostkeeper_caddy_admin_request_duration_seconds_count", { outcome: "4xx" }) >= 1);
  });

  test("Caddy unreachable counts as an admin API error without an answer", async (t) => {
    const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1" });
    const r = await h.call({ method: "POST", url: "/v1/proxy/routes", payload: route("x.test", 8080) });
    assert.equal(r.statusCode, 503, r.body);
    const s = await scrape(h);
    assert.ok(value(s, "hostkeeper_caddy_admin_errors_total", { method: "GET", reason: "unreachable" }) >= 1);
    assert.ok(value(s, "hostkeeper_caddy_admin_request_duration_seconds_count", { outcome: "error" }) >= 1);
    assert.equal(value(s, "hostkeeper_route_changes_total", { operation: "create", outcome: "failed" }), 1);
  });
});

describe("metrics of callbacks", () => {
  test("callbacks to a real loopback receiver move the attempts counter and the events gauge", async (t) => {
    const caddy = await startCaddy(t);
    const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
    const up = await startUpstream(t, "a");
    const ok = await startReceiver(t);
    const gone = await startReceiver(t, { status: () => 410 });

    const a = await h.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: route("cb.test", up.port, ok.url),
    });
    assert.equal(a.statusCode, 201, a.body);
    await ok.waitFor(2, 5000);
    const b = await h.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: route("gone.test", up.port, gone.url),
    });
    assert.equal(b.statusCode, 201, b.body);
    await gone.waitForRequests(2, 5000);

    // The attempt is counted once it is recorded, just after the receiver answered.
    const deadline = Date.now() + 5000;
    let s = await scrape(h);
    while (value(s, "hostkeeper_outbox_delivery_attempts_total") < 4 && Date.now() < deadline) {
      await sleep(20);
      s = await scrape(h);
    }
    assert.equal(value(s, "hostkeeper_outbox_delivery_attempts_total", { outcome: "delivered" }), 2);
    assert.equal(value(s, "hostkeeper_outbox_delivery_attempts_total", { outcome: "gone" }), 2);
    assert.equal(value(s, "hostkeeper_outbox_delivery_attempts_total", { outcome: "failed" }), 0);
    assert.equal(value(s, "hostkeeper_outbox_events", { state: "delivered" }), 2);
    assert.equal(value(s, "hostkeeper_outbox_events", { state: "dead" }), 2);
    assert.equal(value(s, "hostkeeper_outbox_events", { state: "pending" }), 0);
  });

  test("a receiver that is down counts failed attempts and pending events", async (t) => {
    const caddy = await startCaddy(t);
    const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
    const up = await startUpstream(t, "a");
    const down = await startReceiver(t);
    await down.close();
    const r = await h.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: route("down.test", up.port, down.url),
    });
    assert.equal(r.statusCode, 201, r.body);
    const s = await scrape(h);
    // The backup's first attempt failed; the outcome's waits behind it in its ordering key.
    assert.equal(value(s, "hostkeeper_outbox_delivery_attempts_total", { outcome: "failed" }), 1);
    assert.equal(value(s, "hostkeeper_outbox_events", { state: "pending" }), 2);
  });
});
