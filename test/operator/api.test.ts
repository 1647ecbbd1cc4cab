import assert from "node:assert/strict";
import { test } from "node:test";
import { buildTestApp } from "../helpers/app.js";

// No Caddy is needed: nothing here gets as far as the operator's route. The admin address is a closed port.
const base = {
  HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:9",
  HOSTKEEPER_OPERATOR_DOMAIN: "operator.test",
};
const valid = {
  callback_url: "http://127.0.0.1:9/hook",
  update_process_id: "upd-1",
  version: "1.2.3",
  artifact_source: "https://releases.test/operator",
};

test("POST /v1/operator/update: 400 problems name each bad field", async (t) => {
  const { call } = await buildTestApp(t, base);
  const post = (payload: unknown) => call({ method: "POST", url: "/v1/operator/update", payload });
  const fields = async (payload: unknown) => {
    const res = await post(payload);
    assert.equal(res.statusCode, 400, res.body);
    assert.equal(res.headers["content-type"], "application/problem+json; charset=utf-8");
    assert.equal(res.json().code, "validation_failed");
    return (res.json().errors as { field: string }[]).map((e) => e.field).sort();
  };

  assert.deepEqual(await fields({}), ["body.callback_url", "body.update_process_id", "body.version"]);
  assert.deepEqual(await fields({ ...valid, version: "../1.2.3" }), ["body.version"]);
  assert.deepEqual(await fields({ ...valid, version: "1.2/3" }), ["body.version"]);
  assert.deepEqual(await fields({ ...valid, update_process_id: "a/b" }), ["body.update_process_id"]);
  assert.deepEqual(await fields({ ...valid, update_process_id: "..\\x" }), ["body.update_process_id"]);
  assert.deepEqual(await fields({ ...valid, update_process_id: "" }), ["body.update_process_id"]);
  assert.deepEqual(await fields({ ...valid, checksum: "md5:abc" }), ["body.checksum"]);
  assert.deepEqual(await fields({ ...valid, checksum: "a".repeat(63) }), ["body.checksum"]);
  assert.deepEqual(await fields({ ...valid, version: 3 }), ["body.version"]);
  assert.deepEqual(await fields({ ...valid, extra: true }), ["body.extra"]);
  assert.deepEqual(await fields({ ...valid, artifact_source: "ftp://x/y" }), ["body.artifact_source"]);
  assert.deepEqual(await fields({ ...valid, artifact_source: "http://releases.test/op" }), [
    "body.artifact_source",
  ]);
  assert.deepEqual(await fields({ ...valid, artifact_source: "https://u:p@releases.test/op" }), [
    "body.artifact_source",
  ]);
  assert.deepEqual(await fields({ ...valid, artifact_source: "s3://Bad_Bucket/op" }), [
    "body.artifact_source",
  ]);
  assert.deepEqual(await fields({ ...valid, callback_url: "not a url" }), ["body.callback_url"]);
  // The HTTP edge's check and the domain's, in one answer.
  assert.deepEqual(await fields({ ...valid, callback_url: "not a url", artifact_source: "ftp://x/y" }), [
    "body.artifact_source",
    "body.callback_url",
  ]);
  // No artifact_source and no community source configured.
  assert.deepEqual(await fields({ ...valid, artifact_source: null }), ["body.artifact_source"]);

  const malformed = await call({
    method: "POST",
    url: "/v1/operator/update",
    payload: "{",
    headers: { "content-type": "application/json" },
  });
  assert.equal(malformed.statusCode, 400);
  assert.equal(malformed.json().code, "malformed_body");
});

test("GET status: 404 problem for an unknown id; running-instance: 503 problem with nothing installed", async (t) => {
  const { call } = await buildTestApp(t, base);
  const missing = await call({ method: "GET", url: "/v1/operator/update/no-such-update" });
  assert.equal(missing.statusCode, 404);
  assert.equal(missing.json().code, "update_not_found");
  assert.equal(missing.json().type, "urn:hostkeeper:problem:update_not_found");

  const none = await call({ method: "GET", url: "/v1/operator/running-instance" });
  assert.equal(none.statusCode, 503);
  assert.equal(none.json().code, "running_instance_unavailable");

  const anonymous = await call({
    method: "GET",
    url: "/v1/operator/running-instance",
    headers: { authorization: "" },
  });
  assert.equal(anonymous.statusCode, 401);
});

test("without HOSTKEEPER_OPERATOR_DOMAIN an update is refused with 503 operator_not_configured", async (t) => {
  const { call } = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: base.HOSTKEEPER_CADDY_ADMIN });
  const res = await call({ method: "POST", url: "/v1/operator/update", payload: valid });
  assert.equal(res.statusCode, 503);
  assert.equal(res.json().code, "operator_not_configured");
});

test("the OpenAPI document describes the operator endpoints with every body and problem", async (t) => {
  const { call } = await buildTestApp(t, base);
  const doc = (await call({ method: "GET", url: "/v1/openapi.json" })).json();
  const post = doc.paths["/v1/operator/update"].post;
  assert.deepEqual(Object.keys(post.responses).sort(), [
    "202",
    "400",
    "401",
    "403",
    "409",
    "413",
    "415",
    "429",
    "500",
    "503",
  ]);
  assert.deepEqual(post.tags, ["operator"]);
  assert.ok(post.summary && post.description);
  assert.ok(post.requestBody.content["application/json"].schema);
  const status = doc.paths["/v1/operator/update/{update_process_id}"].get;
  assert.deepEqual(Object.keys(status.responses).sort(), ["200", "401", "403", "404", "429", "500"]);
  assert.equal(status.parameters[0].name, "update_process_id");
  const running = doc.paths["/v1/operator/running-instance"].get;
  assert.deepEqual(Object.keys(running.responses).sort(), ["200", "401", "403", "429", "500", "503"]);
  assert.ok(running.responses["200"].content["application/json"].schema);
  assert.match(running.responses["503"].description, /running_instance_unavailable/);
  for (const name of ["OperatorUpdateRequest", "OperatorUpdateStatus", "OperatorRunningInstance"])
    assert.ok(doc.components.schemas[name], name);
});
