import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { buildTestApp, type TestApp } from "../helpers/app.js";
import { startCaddy, type TestCaddy } from "../helpers/caddy.js";
import { capturedLogger } from "../helpers/logs.js";

/*
 * The refusal tests of the site policies (policy-inputs-*.test.ts): one agent on one real Caddy per file,
 * holding the routes a PUT replaces, and the check that a request is refused with a 400 naming its fields
 * while nothing changes (not Caddy's config nor its ETag, not the routes the API lists, not a history).
 */

type After = (fn: () => unknown) => void;

export interface Agent extends TestApp {
  caddy: TestCaddy;
  /** Every line the agent logged, as JSON text. */
  logLines: string[];
}

/** The route (with policies) a PUT replaces, and the wildcard one a PUT with a wildcard domain replaces. */
export const SITE = "site.test";
export const WILD = "*.wild.test";
/**
 * The domain of each POST, new every time, so a request that is wrongly accepted fails its own test only
 * (and a route created at the limits does not meet the next one).
 */
let created = 0;
const fresh = () => `new${++created}.test`;
const freshWild = () => `*.new-wild${++created}.test`;

const UPSTREAMS = [{ dial: "127.0.0.1:9" }];

/** What `SITE` holds before every refusal: policies too, so a PUT that changed them would show. */
const SITE_REQUEST = {
  domain: SITE,
  upstreams: UPSTREAMS,
  redirect_from: [`www.${SITE}`],
  paths: [{ prefix: "/api", upstreams: UPSTREAMS, strip_prefix: true }],
  headers: { response: { set: { "X-Site": "{env.HOME}" }, delete: ["Server"] } },
  encode: ["gzip"],
};

/**
 * One agent for the whole file (`after` is node:test's, so it is stopped when the file ends), with `SITE`
 * and `WILD` created and a logger at the most verbose level whose lines the tests read.
 */
export function sharedAgent(after: After): () => Promise<Agent> {
  let agent: Promise<Agent> | undefined;
  const cleanups: (() => unknown)[] = [];
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  const t = { after: (fn: () => unknown) => void cleanups.push(fn) };
  return () => {
    agent ??= (async () => {
      const caddy = await startCaddy(t);
      const { log: logger, lines: logLines } = capturedLogger("trace");
      const app = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl }, { logger });
      for (const payload of [SITE_REQUEST, { domain: WILD, upstreams: UPSTREAMS }]) {
        const res = await app.call({ method: "POST", url: "/v1/proxy/routes", payload });
        assert.equal(res.statusCode, 201, res.body);
      }
      return { ...app, caddy, logLines };
    })();
    return agent;
  };
}

/** An expected field error: the field, and a pattern its message matches. */
export type Expected = readonly [field: string, message: RegExp];

/** A refusal case: the policy fields of the request (for the domain it is sent with) and what it names. */
export interface Refusal {
  name: string;
  body: (domain: string) => Record<string, unknown>;
  errors: readonly Expected[];
  /** Sent with a wildcard domain (a new wildcard created, `WILD` replaced). */
  wildcard?: boolean;
}

/** What must not change when a request is refused. */
async function snapshot(a: Agent, domain: string) {
  const config = await a.caddy.admin.raw("GET", "/config/");
  const routes = await a.call({ method: "GET", url: "/v1/proxy/routes" });
  const history = async (id: string) => {
    const res = await a.call({ method: "GET", url: `/v1/proxy/routes/${encodeURIComponent(id)}/history` });
    return `${res.statusCode} ${res.body}`;
  };
  return {
    config: config.text,
    etag: config.etag,
    routes: routes.body,
    history: await history(domain),
    site: await history(SITE),
  };
}

/**
 * Sends `payload` as a create of `domain` and as a replace of `existing` (the payload's domain set to
 * each), and checks each is a 400 `validation_failed` naming exactly `errors` in order, with nothing
 * changed. Returns the two answers' bodies.
 */
export async function assertRefused(
  a: Agent,
  payload: (domain: string) => Record<string, unknown>,
  errors: readonly Expected[],
  { created = fresh(), existing = SITE } = {},
): Promise<string[]> {
  const bodies: string[] = [];
  for (const [method, domain, url] of [
    ["POST", created, "/v1/proxy/routes"],
    ["PUT", existing, `/v1/proxy/routes/${encodeURIComponent(existing)}`],
  ] as const) {
    const before = await snapshot(a, domain);
    const res = await a.call({ method, url, payload: { domain, upstreams: UPSTREAMS, ...payload(domain) } });
    const what = `${method} ${domain}: ${res.body.slice(0, 2000)}`;
    assert.equal(res.statusCode, 400, what);
    const problem = res.json() as { code: string; errors: { field: string; message: string }[] };
    assert.equal(problem.code, "validation_failed", what);
    assert.deepEqual(
      problem.errors.map((e) => e.field),
      errors.map(([field]) => field),
      what,
    );
    problem.errors.forEach((e, i) => {
      const want = errors[i]?.[1];
      if (want) assert.match(e.message, want, what);
    });
    assert.deepEqual(await snapshot(a, domain), before, `${method} ${domain} changed something`);
    bodies.push(res.body);
  }
  return bodies;
}

/** Runs one table case through `assertRefused`. */
export const refuse = (a: Agent, c: Refusal) =>
  assertRefused(a, c.body, c.errors, c.wildcard ? { created: freshWild(), existing: WILD } : {});

/**
 * Creates `payload` (a request at the limits of the rules) and checks it is written, and read back as
 * written: the rules refuse no more than they say. The route is deleted again.
 */
export async function assertAccepted(
  a: Agent,
  payload: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const domain = fresh();
  const res = await a.call({
    method: "POST",
    url: "/v1/proxy/routes",
    payload: { domain, upstreams: UPSTREAMS, ...payload },
  });
  assert.equal(res.statusCode, 201, res.body.slice(0, 2000));
  const read = await a.call({ method: "GET", url: `/v1/proxy/routes/${domain}/request` });
  assert.equal(read.statusCode, 200, read.body.slice(0, 2000));
  const del = await a.call({ method: "DELETE", url: `/v1/proxy/routes/${domain}` });
  assert.equal(del.statusCode, 204, del.body);
  return read.json();
}

/** Whether `text` is in any file of the agent's data folder (its database, WAL, secrets). */
export function inDataDir(a: Agent, text: string): string[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (readFileSync(path).includes(text)) found.push(path);
    }
  };
  walk(a.dataDir);
  return found;
}

/** A well-formed bcrypt hash of cost `cost` (two digits) and prefix `$2b$`; its password is no one's. */
export const bcryptLike = (cost = "10", prefix = "$2b$") =>
  `${prefix}${cost}$${"a".repeat(22)}${"B".repeat(31)}`;
