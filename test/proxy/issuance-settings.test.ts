import assert from "node:assert/strict";
import { test } from "node:test";
import { agentCaddyFields } from "../../src/caddy/agent-fields.js";
import {
  ISSUANCE_POLICY_ID,
  issuancePolicy,
  issuanceWarnings,
  policiesWith,
  tlsAddresses,
} from "../../src/caddy/issuance.js";
import { managedServerCreation } from "../../src/caddy/server-creation.js";
import { ConfigError } from "../../src/config.js";
import { loadConfig } from "../../src/settings.js";

const proxyOf = (env: Record<string, string>) => loadConfig({ env }).proxy;

test("the issuance settings: defaults, accepted values and what is refused, naming the setting", () => {
  const d = proxyOf({});
  assert.deepEqual(
    [d.tlsIssuer, d.acmeEmail, d.acmeCa, d.caddyHttpPort, d.caddyHttpsPort],
    ["acme", undefined, undefined, 80, 443],
  );
  const set = proxyOf({
    HOSTKEEPER_TLS_ISSUER: "internal",
    HOSTKEEPER_ACME_EMAIL: "ops@example.com",
    HOSTKEEPER_ACME_CA: "https://ca.example.com/acme/directory",
    HOSTKEEPER_CADDY_HTTP_PORT: "8080",
    HOSTKEEPER_CADDY_HTTPS_PORT: "8443",
  });
  assert.deepEqual(
    [set.tlsIssuer, set.acmeEmail, set.acmeCa, set.caddyHttpPort, set.caddyHttpsPort],
    ["internal", "ops@example.com", "https://ca.example.com/acme/directory", 8080, 8443],
  );
  // A CA on this machine may speak plain HTTP, as Caddy allows.
  assert.equal(
    proxyOf({ HOSTKEEPER_ACME_CA: "http://127.0.0.1:14000/dir" }).acmeCa,
    "http://127.0.0.1:14000/dir",
  );
  const refused: [Record<string, string>, RegExp][] = [
    [{ HOSTKEEPER_TLS_ISSUER: "letsencrypt" }, /HOSTKEEPER_TLS_ISSUER: must be one of acme, internal, off/],
    [{ HOSTKEEPER_ACME_EMAIL: "ops" }, /HOSTKEEPER_ACME_EMAIL: expected an e-mail address/],
    [{ HOSTKEEPER_ACME_EMAIL: "mailto:ops@example.com" }, /HOSTKEEPER_ACME_EMAIL/],
    [{ HOSTKEEPER_ACME_EMAIL: "{env.MAIL}@example.com" }, /HOSTKEEPER_ACME_EMAIL/],
    [{ HOSTKEEPER_ACME_CA: "http://ca.example.com/dir" }, /HOSTKEEPER_ACME_CA: expected the https:\/\/ URL/],
    [{ HOSTKEEPER_ACME_CA: "ca.example.com" }, /HOSTKEEPER_ACME_CA: expected the https:\/\/ URL/],
    [{ HOSTKEEPER_ACME_CA: "https://ca.example.com/{env.X}" }, /HOSTKEEPER_ACME_CA: .*braces/],
    [{ HOSTKEEPER_ACME_CA: "https://u:p@ca.example.com/dir" }, /HOSTKEEPER_ACME_CA: .*credentials/],
    [{ HOSTKEEPER_ACME_CA_ROOT: "roots.pem" }, /HOSTKEEPER_ACME_CA_ROOT: expected the absolute path/],
    [{ HOSTKEEPER_ACME_CA_ROOT: "/etc/{env.X}.pem" }, /HOSTKEEPER_ACME_CA_ROOT: .*braces/],
    [{ HOSTKEEPER_CADDY_HTTP_PORT: "0" }, /HOSTKEEPER_CADDY_HTTP_PORT: must be between 1 and 65535/],
    [{ HOSTKEEPER_CADDY_HTTPS_PORT: "70000" }, /HOSTKEEPER_CADDY_HTTPS_PORT: must be between 1 and 65535/],
    [
      { HOSTKEEPER_CADDY_HTTP_PORT: "443" },
      /HOSTKEEPER_CADDY_HTTPS_PORT: must differ from HOSTKEEPER_CADDY_HTTP_PORT/,
    ],
  ];
  for (const [env, message] of refused)
    assert.throws(
      () => loadConfig({ env }),
      (err: unknown) => err instanceof ConfigError && message.test(err.message),
      JSON.stringify(env),
    );
});

test("which listen addresses serve TLS: every one whose port is not the HTTP port, none with issuer off", () => {
  const listen = [":80", ":443", "127.0.0.1:8080", "[::1]:8443", "unix//run/x.sock"];
  const ports = (env: Record<string, string>) => tlsAddresses(listen, proxyOf(env)).map((a) => a.text);
  assert.deepEqual(ports({}), [":443", "127.0.0.1:8080", "[::1]:8443"]);
  assert.deepEqual(ports({ HOSTKEEPER_CADDY_HTTP_PORT: "8080" }), [":80", ":443", "[::1]:8443"]);
  assert.deepEqual(ports({ HOSTKEEPER_TLS_ISSUER: "off" }), []);
});

test("the start warns when a listen address would serve TLS and no ACME challenge can reach Caddy, and not otherwise", () => {
  const warn = (listen: string[], env: Record<string, string> = {}) => issuanceWarnings(listen, proxyOf(env));
  // The issue's case: a loopback port that is not the HTTP port, with ACME.
  const [w] = warn(["127.0.0.1:8080"]);
  assert.match(
    w ?? "",
    /^HOSTKEEPER_CADDY_LISTEN 127\.0\.0\.1:8080 will serve TLS .* no listen address is on port 80 or 443/,
  );
  // The HTTP or HTTPS port on the loopback only: no CA reaches it.
  assert.equal(warn(["127.0.0.1:80", "127.0.0.1:443"]).length, 1);
  assert.equal(warn(["[::1]:443"]).length, 1);
  // Nothing to say: the defaults, a reachable HTTP or HTTPS port, one that is the configured HTTP port,
  // the local CA, no TLS at all.
  assert.deepEqual(warn([":80", ":443"]), []);
  assert.deepEqual(warn([":443"]), []);
  assert.deepEqual(warn(["10.0.0.5:80", "127.0.0.1:8080"]), []);
  assert.deepEqual(warn([":8443"], { HOSTKEEPER_CADDY_HTTPS_PORT: "8443" }), []);
  assert.deepEqual(warn(["127.0.0.1:8080"], { HOSTKEEPER_CADDY_HTTP_PORT: "8080" }), []);
  assert.deepEqual(warn(["127.0.0.1:8080"], { HOSTKEEPER_TLS_ISSUER: "internal" }), []);
  assert.deepEqual(warn(["127.0.0.1:8080"], { HOSTKEEPER_TLS_ISSUER: "off" }), []);
  // ACME settings with another issuer are not used: said once.
  assert.deepEqual(
    warn([":80", ":443"], { HOSTKEEPER_TLS_ISSUER: "off", HOSTKEEPER_ACME_EMAIL: "a@example.com" }),
    ["HOSTKEEPER_ACME_EMAIL is set but not used: HOSTKEEPER_TLS_ISSUER is off"],
  );
});

test("the agent's policy is the one catch-all, last; policies naming hosts stay where they are", () => {
  const ours = { "@id": ISSUANCE_POLICY_ID, issuers: [{ module: "internal" }] };
  const named = { subjects: ["a.example"], issuers: [{ module: "internal" }] };
  const foreignCatchAll = { issuers: [{ module: "acme", email: "x@example.com" }] };
  assert.deepEqual(policiesWith(undefined, ours), [ours]);
  assert.deepEqual(policiesWith([foreignCatchAll, named], ours), [named, ours]);
  assert.deepEqual(policiesWith([{ ...ours, issuers: [] }, named], ours), [named, ours]);
  // ACME with Caddy's defaults: no policy of the agent's, and the catch-all place kept free for them.
  assert.deepEqual(policiesWith([foreignCatchAll, named, ours], undefined, true), [named]);
  // Issuer off: the agent's own goes, nothing else.
  assert.deepEqual(policiesWith([named, ours], undefined), [named]);
  assert.deepEqual(policiesWith([foreignCatchAll, ours], undefined), [foreignCatchAll]);
  assert.equal(policiesWith([ours], undefined), undefined);
  assert.equal(policiesWith(undefined, undefined), undefined);
});

test("HOSTKEEPER_ACME_CA_ROOT goes into the agent's ACME issuer as the roots Caddy trusts for the CA", () => {
  const proxy = proxyOf({
    HOSTKEEPER_ACME_CA: "https://ca.internal.example/dir",
    HOSTKEEPER_ACME_CA_ROOT: "/etc/hostkeeper/acme-root.pem",
  });
  assert.deepEqual(issuancePolicy(proxy), {
    "@id": ISSUANCE_POLICY_ID,
    issuers: [
      {
        module: "acme",
        ca: "https://ca.internal.example/dir",
        trusted_roots_pem_files: ["/etc/hostkeeper/acme-root.pem"],
      },
    ],
  });
  // Set with another issuer, it is said to be unused.
  const internal = proxyOf({ HOSTKEEPER_TLS_ISSUER: "internal", HOSTKEEPER_ACME_CA_ROOT: "/r.pem" });
  assert.deepEqual(issuanceWarnings([":443"], internal), [
    "HOSTKEEPER_ACME_CA_ROOT is set but not used: HOSTKEEPER_TLS_ISSUER is internal",
  ]);
});

test("what the agent creates carries the fields that lie in it, and only those", () => {
  const proxy = proxyOf({
    HOSTKEEPER_TLS_ISSUER: "off",
    HOSTKEEPER_CADDY_HTTP_PORT: "8080",
    HOSTKEEPER_CADDY_SERVER: "edge",
  });
  const o = { server: "edge", listen: [":8080"], fields: agentCaddyFields(proxy) };
  const server = { listen: [":8080"], routes: [], automatic_https: { disable: true } };
  const pki = { certificate_authorities: { local: { install_trust: false } } };
  // No config at all: everything, the local CA's trust included (no policy: issuer off).
  assert.deepEqual(managedServerCreation(null, o, []), {
    path: "/config/",
    value: { apps: { pki, http: { http_port: 8080, grace_period: "10s", servers: { edge: server } } } },
  });
  // An HTTP app of someone else's: the server alone, with its own field; the app's fields are written apart.
  assert.deepEqual(managedServerCreation({ apps: { http: { servers: { other: {} } } } }, o, []), {
    path: "/config/apps/http/servers/edge",
    value: server,
  });
  // No HTTP app: the app with its ports and grace_period, and the server.
  assert.deepEqual(managedServerCreation({ apps: { pki } }, o, []), {
    path: "/config/apps/http",
    value: { http_port: 8080, grace_period: "10s", servers: { edge: server } },
  });
});
