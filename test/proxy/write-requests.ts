import fc from "fast-check";
import Fastify from "fastify";
import {
  proxySharedSchemas,
  type RouteWriteRequest,
  RouteWriteRequestSchema,
} from "../../src/proxy/schemas.js";
import { RefTo } from "../../src/util/typebox.js";

/*
 * Write requests the API accepts, for the property tests of written-request.test.ts: every policy, alone
 * or mixed, with the text a caller may send (placeholders, backslashes, any Unicode) where it may.
 */

/** A host label; never `ab--`, the form of punycode labels (which must decode). */
const label = fc.stringMatching(/^[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?$/).filter((l) => !/^..--/.test(l));
/** Domains as callers write them: lowercase, mixed case with a trailing dot, Unicode, wildcards. */
const domain = fc.oneof(
  label.map((l) => `${l}.site.test`),
  label.map((l) => `${l.toUpperCase()}.Site.TEST.`),
  label.map((l) => `bücher-${l}.test`),
  label.map((l) => `*.${l}.wild.test`),
);
const port = fc.integer({ min: 1, max: 65_535 });
const dial = fc.oneof(
  port.map((p) => `127.0.0.1:${p}`),
  port.map((p) => `[::1]:${p}`),
  port.map((p) => `LocalHost.:${p}`),
  fc.tuple(label, port).map(([l, p]) => `${l}.internal:${p}`),
);
/** `upstreams` and `strategy` of a route or a path: weights only with weighted_round_robin, summing to > 0. */
const balanced = fc.oneof(
  fc.record(
    {
      upstreams: fc.array(
        dial.map((d) => ({ dial: d })),
        { minLength: 1, maxLength: 3 },
      ),
      strategy: fc.constant("first" as const),
    },
    { requiredKeys: ["upstreams"] },
  ),
  fc
    .array(fc.record({ dial, weight: fc.integer({ min: 0, max: 9 }) }, { requiredKeys: ["dial"] }), {
      minLength: 1,
      maxLength: 3,
    })
    .filter((ups) => ups.reduce((sum, u) => sum + (u.weight ?? 1), 0) > 0)
    .map((upstreams) => ({ upstreams, strategy: "weighted_round_robin" as const })),
);
/** Text Caddy would expand if it were not escaped, and text that looks escaped already. */
const PLACEHOLDERS = [
  "{env.HOME}",
  "\\{x}",
  "a\\{b}",
  "a\\\\{b}",
  "}{",
  "{file./etc/hostname}",
  "\\",
  "{",
  "}",
];
export const text = (maxLength: number) =>
  fc.oneof(
    fc.string({ maxLength }),
    fc.constantFrom(...PLACEHOLDERS),
    fc.string({ unit: "grapheme", maxLength }),
  );
/** A header value: no control character but tab (RFC 9110). */
export const headerValue = text(24).filter((v) =>
  [...v].every((c) => c === "\t" || (c >= " " && c !== "\u007f")),
);
const REFUSED = [
  "connection",
  "content-length",
  "transfer-encoding",
  "upgrade",
  "keep-alive",
  "te",
  "trailer",
];
const headerName = fc
  .stringMatching(/^[!#$%&'+\-.^_`|~0-9A-Za-z]{1,10}$/)
  .filter((n) => !REFUSED.includes(n.toLowerCase()) && n !== "__proto__");
const headerOps = fc
  .record({
    set: fc.uniqueArray(fc.tuple(headerName, headerValue), {
      maxLength: 4,
      selector: ([n]) => n.toLowerCase(),
    }),
    delete: fc.uniqueArray(headerName, { maxLength: 4, selector: (n) => n.toLowerCase() }),
    has: fc.record({ set: fc.boolean(), delete: fc.boolean() }),
  })
  .map(({ set, delete: del, has }) => {
    const setNames = new Set(set.map(([n]) => n.toLowerCase()));
    return {
      ...(has.set ? { set: Object.fromEntries(set) } : {}),
      ...(has.delete ? { delete: del.filter((n) => !setNames.has(n.toLowerCase())) } : {}),
    };
  });
const segment = fc
  .stringMatching(/^[A-Za-z0-9\-._~!$&'()+,;=:@]{1,6}$/)
  .filter((s) => s !== "." && s !== "..");
const prefix = fc.array(segment, { minLength: 1, maxLength: 3 }).map((s) => `/${s.join("/")}`);
const path = fc
  .tuple(prefix, balanced, fc.option(fc.boolean(), { nil: undefined }))
  .map(([p, b, strip]) => ({ prefix: p, ...b, ...(strip === undefined ? {} : { strip_prefix: strip }) }));
/** A bcrypt hash of `cost`: every user of a route has the same. */
const bcrypt = (cost: number) =>
  fc
    .tuple(fc.constantFrom("$2a$", "$2b$", "$2y$"), fc.stringMatching(/^[./A-Za-z0-9]{53}$/))
    .map(([p, rest]) => `${p}${String(cost).padStart(2, "0")}$${rest}`);
const username = text(20).filter(
  (u) => u.length > 0 && u.length <= 128 && !u.includes(":") && !/\p{Cc}/u.test(u),
);
const cidr = fc.oneof(
  fc.ipV4(),
  fc.ipV6(),
  fc.tuple(fc.ipV4(), fc.integer({ min: 0, max: 32 })).map(([ip, bits]) => `${ip}/${bits}`),
  fc.tuple(fc.ipV6(), fc.integer({ min: 0, max: 128 })).map(([ip, bits]) => `${ip}/${bits}`),
);
const policyFields = {
  terminal: fc.boolean(),
  redirect_from: fc.uniqueArray(fc.tuple(label, fc.boolean()), {
    minLength: 1,
    maxLength: 4,
    selector: ([l]) => l,
  }),
  redirect_status: fc.constantFrom(301, 302, 307, 308),
  paths: fc.uniqueArray(path, { minLength: 1, maxLength: 4, selector: (p) => p.prefix.toLowerCase() }),
  basic_auth: fc.integer({ min: 4, max: 14 }).chain((cost) =>
    fc.record(
      {
        realm: fc.stringMatching(/^[ !#-[\]-~]{1,20}$/),
        users: fc.uniqueArray(fc.record({ username, password_hash: bcrypt(cost) }), {
          minLength: 1,
          maxLength: 3,
          selector: (u) => u.username,
        }),
      },
      { requiredKeys: ["users"] },
    ),
  ),
  allow_ips: fc.array(cidr, { minLength: 1, maxLength: 4 }),
  headers: fc.record({ request: headerOps, response: headerOps }, { requiredKeys: [] }),
  maintenance: fc.record(
    {
      status: fc.integer({ min: 400, max: 599 }),
      retry_after: fc.integer({ min: 0, max: 86_400 }),
      body: text(40),
      content_type: fc.constantFrom(
        "text/plain",
        "application/json",
        "text/html;charset=utf-8",
        'text/plain; a="{env.HOME}"; b="}{"',
      ),
    },
    { requiredKeys: [] },
  ),
  encode: fc.constantFrom<("zstd" | "gzip")[]>(["zstd"], ["gzip"], ["zstd", "gzip"], ["gzip", "zstd"]),
  // Not a policy, but written into the route the same way: its first handler.
  access_log: fc.constant(true),
  // Nor this: a marker handler after the access log's.
  https_redirect: fc.constant(false),
};
type Policies = {
  [K in keyof typeof policyFields]?: (typeof policyFields)[K] extends fc.Arbitrary<infer T> ? T : never;
};
/** Any mix of policies, and often one alone: a policy that compiles to nothing shows only then. */
const policies: fc.Arbitrary<Policies> = fc.oneof(
  fc.record(policyFields, { requiredKeys: [] }),
  ...Object.entries(policyFields).map(([k, arb]) => (arb as fc.Arbitrary<unknown>).map((v) => ({ [k]: v }))),
);
/** A request the API's schema and domain rules accept. */
export const request: fc.Arbitrary<RouteWriteRequest> = fc
  .tuple(domain, balanced, policies)
  .map(([d, b, { redirect_from, redirect_status, ...rest }]) => {
    const redirects =
      redirect_from && !d.startsWith("*.")
        ? {
            redirect_from: redirect_from.map(([l, up]) =>
              up ? `WWW-${l.toUpperCase()}.Redir.Test.` : `www-${l}.redir.test`,
            ),
          }
        : {};
    const status = redirects.redirect_from && redirect_status ? { redirect_status } : {};
    return { domain: d, ...b, ...rest, ...redirects, ...status };
  });

/** The API's own validation of a write request: its schemas, with the agent's validator options. */
export async function schemaCheck(): Promise<(body: unknown) => Promise<string>> {
  const app = Fastify({
    ajv: {
      customOptions: { removeAdditional: false, coerceTypes: false, allErrors: true, useDefaults: false },
    },
  });
  for (const s of proxySharedSchemas) app.addSchema(s);
  app.post("/", { schema: { body: RefTo(RouteWriteRequestSchema) } }, async () => "ok");
  await app.ready();
  return async (body) => (await app.inject({ method: "POST", url: "/", payload: body as object })).body;
}
