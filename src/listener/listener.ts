import { X509Certificate } from "node:crypto";
import https from "node:https";
import type { Socket } from "node:net";
import { dirname } from "node:path";
import { createSecureContext, type SecureContextOptions } from "node:tls";
import type { FastifyServerFactory, FastifyServerOptions } from "fastify";
import type { Logger } from "pino";
import { ConfigError } from "../config.js";
import type { AppConfig } from "../settings.js";
import { AddressSet, LOOPBACK } from "../util/cidrs.js";
import type { FSWatcher, RequestListener, Server } from "../util/node-builtins.js";
import { fs, http } from "../util/node-builtins.js";
import { Periodic } from "../util/periodic.js";
import { hostPort } from "../util/urls.js";
import { listenerSettings } from "./settings.js";

const { readFileSync, statSync, watch } = fs;

type ListenerConfig = AppConfig["listener"];

/** Whether a listen host reaches this host only: `localhost`, 127.0.0.0/8, `::1` (not the wildcards). */
export function isLoopbackHost(host: string): boolean {
  if (host === "localhost") return true;
  return LOOPBACK.has(host);
}

/**
 * The refusal to serve plain HTTP beyond loopback: the token on every request would cross the network in
 * clear text. Throws the ConfigError that says why and what to set.
 */
export function checkPlaintext(listen: { host: string; port: number }, c: ListenerConfig): void {
  if (c.tlsCert !== undefined || c.allowPlaintext || isLoopbackHost(listen.host)) return;
  throw new ConfigError(
    "HOSTKEEPER_LISTEN",
    `refusing to serve plain HTTP on ${hostPort(listen)}, which is not a loopback address: every request's bearer token would cross the network in clear text, for anyone on the path to read and replay. ` +
      `Set ${listenerSettings.tlsCert.env} and ${listenerSettings.tlsKey.env} (see docs/security.md, Deploying with TLS and client certificates), listen on 127.0.0.1, ` +
      `or set ${listenerSettings.allowPlaintext.env}=true if the network itself is encrypted and trusted`,
  );
}

interface TlsFiles {
  cert: string;
  key: string;
  clientCa: string | undefined;
}

/** What identifies a version of the files: a rewrite, a rename over them or a new symlink target changes it. */
function fingerprint(files: TlsFiles): string {
  return [files.cert, files.key, files.clientCa]
    .map((f) => {
      if (f === undefined) return "-";
      try {
        const s = statSync(f);
        return `${s.ino}:${s.size}:${s.mtimeMs}`;
      } catch {
        return "missing";
      }
    })
    .join("|");
}

/** Reads the pair (and the client CA) and checks that they load together: a key that is not the cert's throws. */
function loadTls(files: TlsFiles): { options: SecureContextOptions; cert: X509Certificate } {
  const options: SecureContextOptions = {
    cert: readFileSync(files.cert),
    key: readFileSync(files.key),
    ...(files.clientCa === undefined ? {} : { ca: readFileSync(files.clientCa) }),
  };
  createSecureContext(options);
  return { options, cert: new X509Certificate(options.cert as Buffer) };
}

const describe = (cert: X509Certificate) => ({
  subject: cert.subject.replace(/\n/g, ", "),
  issuer: cert.issuer.replace(/\n/g, ", "),
  valid_to: new Date(cert.validTo).toISOString(),
  fingerprint256: cert.fingerprint256,
});

const REFUSAL_LOG_EVERY_MS = 60_000;

/**
 * The agent's listener, made for Fastify (`serverFactory`): HTTPS when a certificate is configured (with
 * client certificates required when a client CA is), else HTTP; with allowed address ranges, a connection
 * from elsewhere is destroyed the moment it is accepted, before the TLS handshake and before any byte of
 * HTTP is read. The certificate files are watched (their folders, as tools replace files by renaming) and
 * checked on an interval; a changed set that loads replaces the server's secure context for new
 * connections, one that does not is logged and the old one kept.
 */
export class Listener {
  readonly factory: FastifyServerFactory;
  private readonly files: TlsFiles | undefined;
  /** The TLS files as read at start, before anything else starts (a ConfigError when they do not load). */
  private readonly initial: ReturnType<typeof loadTls> | undefined;
  private readonly allowed: AddressSet | undefined;
  private seen = "";
  private readonly watchers: FSWatcher[] = [];
  private interval: Periodic | undefined;
  private debounce: NodeJS.Timeout | undefined;
  private counts = { refusals: { count: 0, loggedAt: 0 }, handshakes: { count: 0, loggedAt: 0 } };

  constructor(
    private readonly c: ListenerConfig,
    private readonly log: Logger,
  ) {
    this.files =
      c.tlsCert === undefined || c.tlsKey === undefined
        ? undefined
        : { cert: c.tlsCert, key: c.tlsKey, clientCa: c.tlsClientCa };
    if (this.files) {
      this.seen = fingerprint(this.files);
      this.initial = this.loadOrExplain(this.files);
    }
    this.allowed = c.allowedCidrs.length > 0 ? new AddressSet(c.allowedCidrs) : undefined;
    this.factory = (handler, opts) => this.create(handler, opts) as Server;
  }

  /** `https` or `http`, for the start line. */
  get scheme(): "https" | "http" {
    return this.files ? "https" : "http";
  }

  private create(handler: RequestListener, opts: FastifyServerOptions): Server | https.Server {
    // What Fastify sets on a server it makes itself; Node would answer a missing Host itself, in plain text,
    // where the edge's hook answers it as a problem.
    const base = { requireHostHeader: false };
    let server: Server | https.Server;
    if (this.files && this.initial) {
      const { options, cert } = this.initial;
      const clientCerts = this.files.clientCa !== undefined;
      server = https.createServer(
        { ...base, ...options, requestCert: clientCerts, rejectUnauthorized: clientCerts },
        handler,
      );
      this.log.info(
        { tls: describe(cert), client_certificates: clientCerts },
        `TLS on the API with ${cert.subject.replace(/\n/g, ", ")}, valid until ${new Date(cert.validTo).toISOString()}${clientCerts ? "; client certificates required" : ""}`,
      );
      if (new Date(cert.validTo).getTime() < Date.now())
        this.log.warn({ tls: describe(cert) }, "the API's TLS certificate has expired");
      this.watch(server as https.Server, this.files);
      server.on("tlsClientError", (err: NodeJS.ErrnoException, socket: Socket) =>
        this.throttled(
          "handshakes",
          { remote_address: socket.remoteAddress, err: err.code ?? err.message },
          `a TLS handshake from ${socket.remoteAddress} failed (${err.code ?? err.message})`,
        ),
      );
    } else server = http.createServer(base, handler);
    if (opts.keepAliveTimeout !== undefined) server.keepAliveTimeout = opts.keepAliveTimeout;
    if (opts.requestTimeout !== undefined) server.requestTimeout = opts.requestTimeout;
    if (opts.connectionTimeout !== undefined) server.setTimeout(opts.connectionTimeout);
    if (this.allowed) {
      const allowed = this.allowed;
      // First of the 'connection' listeners: the TLS or HTTP machinery never sees a refused socket's bytes.
      server.prependListener("connection", (socket: Socket) => {
        if (!allowed.has(socket.remoteAddress ?? "")) this.refuse(socket);
      });
    }
    server.once("close", () => this.close());
    return server;
  }

  private loadOrExplain(files: TlsFiles): ReturnType<typeof loadTls> {
    try {
      return loadTls(files);
    } catch (err) {
      throw new ConfigError(
        listenerSettings.tlsCert.env,
        `cannot use ${files.cert} with ${files.key}${files.clientCa ? ` and ${files.clientCa}` : ""}: ${(err as Error).message}`,
      );
    }
  }

  private refuse(socket: Socket): void {
    const address = socket.remoteAddress;
    socket.destroy();
    this.throttled(
      "refusals",
      { remote_address: address },
      `closed a connection from ${address}, outside HOSTKEEPER_ALLOWED_CIDRS`,
    );
  }

  /**
   * A warning about what anyone who can connect can cause: at most one line a minute per kind, counting
   * what it did not log, so a scanner cannot flood the log.
   */
  private throttled(kind: "refusals" | "handshakes", fields: object, message: string): void {
    const t = this.counts[kind];
    t.count++;
    const now = Date.now();
    if (now - t.loggedAt < REFUSAL_LOG_EVERY_MS) return;
    this.log.warn(
      { ...fields, [`${kind}_since_last_line`]: t.count },
      `${message} (${t.count} since the last such line; at most one a minute)`,
    );
    this.counts[kind] = { count: 0, loggedAt: now };
  }

  private watch(server: https.Server, files: TlsFiles): void {
    const check = () => {
      clearTimeout(this.debounce);
      // Tools write a pair as several steps (cert, then key): the files are read once they are quiet.
      this.debounce = setTimeout(() => this.reload(server, files), 200);
      this.debounce.unref();
    };
    const dirs = new Set([files.cert, files.key, files.clientCa].filter((f) => f !== undefined).map(dirname));
    for (const dir of dirs) {
      try {
        const w = watch(dir, { persistent: false }, check);
        w.on("error", (err) =>
          this.log.warn({ err, dir }, "cannot watch the TLS files' folder; checking on the interval only"),
        );
        this.watchers.push(w);
      } catch (err) {
        this.log.warn({ err, dir }, "cannot watch the TLS files' folder; checking on the interval only");
      }
    }
    this.interval = new Periodic({
      intervalMs: this.c.tlsReloadIntervalMs,
      round: check,
      what: "looking at the API's TLS files",
      log: this.log,
    });
    this.interval.start();
  }

  private reload(server: https.Server, files: TlsFiles): void {
    const now = fingerprint(files);
    if (now === this.seen) return;
    this.seen = now;
    try {
      const { options, cert } = loadTls(files);
      server.setSecureContext(options);
      this.log.info(
        { tls: describe(cert) },
        `reloaded the API's TLS files: ${cert.subject.replace(/\n/g, ", ")}, valid until ${new Date(cert.validTo).toISOString()}`,
      );
    } catch (err) {
      this.log.error(
        { err, cert: files.cert, key: files.key, client_ca: files.clientCa ?? null },
        `the changed TLS files do not load (${(err as Error).message}); new connections keep the previous certificate`,
      );
    }
  }

  close(): void {
    for (const w of this.watchers.splice(0)) w.close();
    void this.interval?.stop();
    clearTimeout(this.debounce);
  }
}
