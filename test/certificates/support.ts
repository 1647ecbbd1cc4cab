import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import { connect, type PeerCertificate } from "node:tls";
import type pino from "pino";
import { freePort } from "../../support/loopback.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { startUpstream } from "../helpers/http.js";

export interface Entry {
  host: string | null;
  name: string | null;
  names: string[];
  source: string | null;
  issuer: string | null;
  serial: string | null;
  not_before: string | null;
  not_after: string | null;
  status: string;
  error: { message: string; at: string | null } | null;
}

/** A test CA made with openssl in a folder of its own; `issue` signs server certificates with given dates. */
export function testCa(t: { after: (fn: () => unknown) => void }) {
  const dir = mkdtempSync(join(tmpdir(), "hk-certca-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const run = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  run(
    "req",
    "-x509",
    ...ec,
    "-keyout",
    "ca.key",
    "-out",
    "ca.crt",
    "-days",
    "30",
    "-subj",
    "/CN=hk cert test CA",
  );
  writeFileSync(join(dir, "index.txt"), "");
  writeFileSync(join(dir, "serial"), "2000\n");
  let n = 0;
  /**
   * A certificate for `names` valid from `start` to `end` (openssl `ca` dates: YYYYMMDDHHMMSSZ), its subject's
   * CN `cn` (the first name unless given).
   */
  const issue = (names: string[], start: Date, end: Date, cn = names[0]) => {
    const id = `c${++n}`;
    const stamp = (d: Date) => `${d.toISOString().replace(/[-:T]/g, "").slice(0, 14)}Z`;
    writeFileSync(
      join(dir, `${id}.cnf`),
      [
        "[ca]",
        "default_ca = tca",
        "[tca]",
        "database = index.txt",
        "new_certs_dir = .",
        "serial = serial",
        "default_md = sha256",
        "policy = pol",
        "unique_subject = no",
        "copy_extensions = none",
        "[pol]",
        "commonName = supplied",
        "[ext]",
        "basicConstraints = CA:FALSE",
        "extendedKeyUsage = serverAuth",
        `subjectAltName = ${names.map((x) => `DNS:${x}`).join(",")}`,
        "",
      ].join("\n"),
    );
    run("req", ...ec, "-keyout", `${id}.key`, "-out", `${id}.csr`, "-subj", `/CN=${cn}`);
    run(
      ...["ca", "-batch", "-notext", "-config", `${id}.cnf`, "-cert", "ca.crt", "-keyfile", "ca.key"],
      ...["-extensions", "ext", "-in", `${id}.csr`, "-out", `${id}.crt`],
      ...["-startdate", stamp(start), "-enddate", stamp(end)],
    );
    return {
      cert: readFileSync(join(dir, `${id}.crt`), "utf8"),
      key: readFileSync(join(dir, `${id}.key`), "utf8"),
    };
  };
  return { dir, issue, caPem: readFileSync(join(dir, "ca.crt"), "utf8") };
}

/** The leaf certificate a TLS client gets from 127.0.0.1:`port` when it asks for `servername`. */
export function peerCertificate(port: number, servername: string): Promise<PeerCertificate> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port, servername, rejectUnauthorized: false }, () => {
      const cert = socket.getPeerCertificate();
      socket.end();
      resolve(cert);
    });
    socket.setTimeout(5_000, () => socket.destroy(new Error("no TLS handshake within 5 s")));
    socket.on("error", reject);
  });
}

export const DAY = 86_400_000;

/**
 * The agent on a real Caddy whose managed server `srv0` serves TLS on a loopback port: Caddy's internal CA
 * issues for every host (never installed into the host's trust: `install_trust: false` from the first load),
 * but for `deadHosts`, whose ACME CA is a loopback port nothing listens on. Caddy logs JSON to a file.
 */
export async function tlsSetup(
  t: TestContext | { after: (fn: () => unknown) => void },
  deadHosts: string[] = [],
  opts: {
    logger?: pino.Logger;
    /** Caddy's `storage`: a `file_system` one at this folder, and no HOSTKEEPER_CADDY_DATA_DIR. */
    storageRoot?: string;
    /** Neither a storage in Caddy's config nor HOSTKEEPER_CADDY_DATA_DIR. */
    storageUnknown?: boolean;
    /** HOSTKEEPER_CADDY_DATA_DIR, beside `storageRoot`: the folder whose owner is Caddy's user. */
    caddyDataDir?: string;
    /** More of the agent's settings. */
    env?: Record<string, string>;
  } = {},
) {
  const tlsPort = await freePort();
  const httpPort = await freePort();
  const deadCa = `http://127.0.0.1:${await freePort()}/directory`;
  const logDir = mkdtempSync(join(tmpdir(), "hk-caddylog-"));
  t.after(() => rmSync(logDir, { recursive: true, force: true }));
  const log = join(logDir, "caddy.log");
  const caddy = await startCaddy(t, {
    withServer: false,
    extra: {
      apps: {
        http: {
          http_port: httpPort,
          https_port: tlsPort,
          grace_period: "10s",
          servers: {
            srv0: {
              listen: [`127.0.0.1:${tlsPort}`],
              routes: [],
              automatic_https: { disable_redirects: true },
            },
          },
        },
        tls: {
          // The expired certificate a test puts in storage must stay there.
          disable_storage_clean: true,
          automation: {
            policies: [
              ...(deadHosts.length > 0
                ? [{ subjects: deadHosts, issuers: [{ module: "acme", ca: deadCa }] }]
                : []),
              { issuers: [{ module: "internal" }] },
            ],
          },
        },
        pki: { certificate_authorities: { local: { install_trust: false } } },
      },
      logging: {
        logs: { default: { writer: { output: "file", filename: log }, encoder: { format: "json" } } },
      },
      ...(opts.storageRoot ? { storage: { module: "file_system", root: opts.storageRoot } } : {}),
    },
  });
  const dataDir = join(caddy.dir, "data");
  mkdirSync(join(dataDir, "caddy"), { recursive: true });
  const env: Record<string, string> = {
    HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl,
    HOSTKEEPER_CADDY_LISTEN: `127.0.0.1:${tlsPort}`,
    // The agent's issuance settings as this Caddy already holds them: its start changes none of them.
    HOSTKEEPER_TLS_ISSUER: "internal",
    HOSTKEEPER_CADDY_HTTP_PORT: String(httpPort),
    HOSTKEEPER_CADDY_HTTPS_PORT: String(tlsPort),
    ...(opts.storageRoot || opts.storageUnknown ? {} : { HOSTKEEPER_CADDY_DATA_DIR: dataDir }),
    ...(opts.caddyDataDir ? { HOSTKEEPER_CADDY_DATA_DIR: opts.caddyDataDir } : {}),
    ...opts.env,
  };
  const h = await buildTestApp(t, env, opts.logger ? { logger: opts.logger } : {});
  const up = await startUpstream(t, "u");
  const addRoute = async (domain: string, extra: Record<string, unknown> = {}) => {
    const r = await h.call({
      method: "POST",
      url: "/v1/proxy/routes",
      payload: { domain, upstreams: [{ dial: `127.0.0.1:${up.port}` }], ...extra },
    });
    if (r.statusCode !== 201) throw new Error(`create ${domain}: ${r.statusCode} ${r.body}`);
  };
  const list = async (): Promise<Entry[]> => {
    const r = await h.call({ method: "GET", url: "/v1/proxy/certificates" });
    if (r.statusCode !== 200) throw new Error(`list: ${r.statusCode} ${r.body}`);
    return (JSON.parse(r.body) as { certificates: Entry[] }).certificates;
  };
  const entry = async (host: string) => (await list()).find((e) => e.host === host);
  // Where Caddy keeps what the dead CA would have issued (certmagic's storage key of its URL).
  const deadIssuerDir = join(
    opts.storageRoot ?? join(dataDir, "caddy"),
    "certificates",
    `${new URL(deadCa).host.replace(":", "-")}-directory`,
  );
  return { caddy, env, ...h, tlsPort, log, dataDir, deadIssuerDir, addRoute, list, entry };
}

/** Puts a certificate into Caddy's storage as Caddy itself stores one it obtained for `name`. */
export function storeAsCaddy(issuerDir: string, name: string, cert: { cert: string; key: string }): void {
  const dir = join(issuerDir, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.crt`), cert.cert);
  writeFileSync(join(dir, `${name}.key`), cert.key, { mode: 0o600 });
  writeFileSync(join(dir, `${name}.json`), JSON.stringify({ sans: [name], issuer_data: null }));
}
