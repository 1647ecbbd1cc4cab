import https from "node:https";
import type { ConnectionOptions } from "node:tls";
import { type ConfigSource, settingInput } from "../config.js";
import { agentTlsOptions } from "../listener/client.js";
import { packageVersion } from "../paths.js";
import { type AppConfig, agentSettings, configSourceFromProcess, loadConfig } from "../settings.js";
import { readSecret } from "../store/secrets.js";
import { http } from "../util/node-builtins.js";
import { hostPort } from "../util/urls.js";

/** A command that ran and failed (exit code 1), said in one line. */
export class CliFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CliFailure";
  }
}

/** The agent could not be reached, or did not answer in time. */
export class AgentUnreachable extends CliFailure {
  constructor(message: string) {
    super(message);
    this.name = "AgentUnreachable";
  }
}

/** The agent answered with an error status; `text` is its body as it came (a problem, normally). */
export class ApiProblem extends CliFailure {
  constructor(
    readonly status: number,
    readonly text: string,
  ) {
    super(problemLine(status, text));
    this.name = "ApiProblem";
  }
}

const oneLine = (s: string) => s.replace(/\s+/g, " ").trim();

/** A problem in one line: `409 route_exists: a route with @id app.example already exists`. */
export function problemLine(status: number, text: string): string {
  try {
    const p = JSON.parse(text) as { code?: unknown; detail?: unknown; title?: unknown };
    if (typeof p?.code === "string")
      return oneLine(`${status} ${p.code}: ${String(p.detail ?? p.title ?? "")}`);
  } catch {
    // not a problem body: said below as what it is
  }
  const body = oneLine(text).slice(0, 200);
  return `${status} ${http.STATUS_CODES[status] ?? "error"}${body ? `: ${body}` : ""}`;
}

/** The configuration exactly as the agent reads it (environment > file > default); throws its ConfigError. */
export function loadAgentConfig(env: NodeJS.ProcessEnv = process.env): {
  config: AppConfig;
  source: ConfigSource;
} {
  const source = configSourceFromProcess(env);
  return { config: loadConfig(source), source };
}

export interface AgentAddress {
  host: string;
  port: number;
}

/** Where a client on this host reaches the agent: a wildcard listen address means the loopback. */
export function agentAddress(listen: AgentAddress): AgentAddress {
  if (listen.host === "0.0.0.0") return { host: "127.0.0.1", port: listen.port };
  if (listen.host === "::") return { host: "::1", port: listen.port };
  return listen;
}

/**
 * The token the agent uses, found the way it finds it: HOSTKEEPER_TOKEN (environment or config file), else
 * `<data dir>/token`, which the agent generated at its first start (mode 0600: root reads it). Creates nothing.
 */
export function agentToken(config: AppConfig, source: ConfigSource): { value: string; from: string } {
  if (config.agent.token !== undefined) {
    const { origin } = settingInput(agentSettings.token, source);
    return { value: config.agent.token, from: origin === "environment" ? "HOSTKEEPER_TOKEN" : "config file" };
  }
  let found: ReturnType<typeof readSecret>;
  try {
    found = readSecret(config.agent.dataDir, "token");
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const path = e.path ?? `${config.agent.dataDir}/token`;
    if (e.code === "EACCES" || e.code === "EPERM")
      throw new CliFailure(
        `cannot read the token file ${path}: permission denied (it is readable by root only: run as root, or set HOSTKEEPER_TOKEN)`,
      );
    throw new CliFailure(`cannot read the token file ${path}: ${e.message}`);
  }
  if (found.value === undefined)
    throw new CliFailure(
      `no token in ${found.path}: the agent writes it at its first start (or set HOSTKEEPER_TOKEN)`,
    );
  return { value: found.value, from: found.path };
}

export interface RequestOptions {
  body?: unknown;
  /** false: no bearer token (`/healthz`, `/readyz`). */
  auth?: boolean;
  headers?: Record<string, string>;
}

export interface AgentAnswer {
  status: number;
  /** The body as it came. */
  text: string;
}

/**
 * A client of the local agent's API: every request has a time-out and a fresh connection, and a failure to
 * reach the agent is a CliFailure in one line. The token is read on the first request that needs it, so a
 * command that needs none (`GET /healthz`) works without it.
 */
export class AgentClient {
  private readonly userAgent = `hostkeeper-cli/${packageVersion()}`;

  constructor(
    readonly address: AgentAddress,
    private readonly token: () => string,
    private readonly timeoutMs: number,
    /** TLS towards an agent that serves HTTPS; undefined for plain HTTP. */
    private readonly tls?: ConnectionOptions,
  ) {}

  /** Sends the request (with more `headers`, e.g. `prefer`); any status is an answer. */
  async request(method: string, path: string, opts: RequestOptions = {}): Promise<AgentAnswer> {
    const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const headers: Record<string, string> = {
      ...opts.headers,
      accept: "application/json",
      "user-agent": this.userAgent,
    };
    if (opts.auth !== false) headers.authorization = `Bearer ${this.token()}`;
    if (payload !== undefined) {
      headers["content-type"] = "application/json";
      headers["content-length"] = String(Buffer.byteLength(payload));
    }
    const where = `${this.tls ? "https://" : ""}${hostPort(this.address)}`;
    return new Promise((resolve, reject) => {
      let timedOut = false;
      const fail = (err: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        if (timedOut)
          reject(
            new AgentUnreachable(
              `the agent at ${where} did not answer ${method} ${path} within ${this.timeoutMs / 1000} s (see --timeout)`,
            ),
          );
        else if (err.code === "ECONNREFUSED")
          reject(new AgentUnreachable(`the agent is not running at ${where} (connection refused)`));
        else reject(new AgentUnreachable(`cannot reach the agent at ${where}: ${tlsHint(err)}`));
      };
      const options = {
        host: this.address.host,
        port: this.address.port,
        method,
        path,
        headers,
        agent: false,
      };
      const req = (this.tls ? https.request : http.request)(
        this.tls ? { ...options, ...this.tls } : options,
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => {
            clearTimeout(timer);
            resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") });
          });
          res.on("error", fail);
        },
      );
      const timer = setTimeout(() => {
        timedOut = true;
        req.destroy();
      }, this.timeoutMs);
      req.on("error", fail);
      req.end(payload);
    });
  }

  /** Sends the request; an error status is thrown as an ApiProblem. */
  async call(method: string, path: string, opts: RequestOptions = {}): Promise<AgentAnswer> {
    const answer = await this.request(method, path, opts);
    if (answer.status >= 400) throw new ApiProblem(answer.status, answer.text);
    return answer;
  }
}

/** What a failure to connect says, with what to set when the agent's TLS refused the CLI. */
function tlsHint(err: NodeJS.ErrnoException): string {
  const said = err.code && !err.message.includes(err.code) ? `${err.code}: ${err.message}` : err.message;
  if (/CERTIFICATE_REQUIRED|UNKNOWN_CA|BAD_CERTIFICATE|CERTIFICATE_EXPIRED/.test(err.code ?? ""))
    return `${said} (the agent requires a client certificate from its HOSTKEEPER_TLS_CLIENT_CA: set HOSTKEEPER_CLI_TLS_CERT and HOSTKEEPER_CLI_TLS_KEY)`;
  return said;
}

/** A client of the agent the configuration names, with the command's time-out. */
export function connect(timeoutMs: number, env: NodeJS.ProcessEnv = process.env): AgentClient {
  const { config, source } = loadAgentConfig(env);
  if (config.agent.listen === "off")
    throw new CliFailure(
      "the agent listens on nothing (HOSTKEEPER_LISTEN=off): it is reached only through its connection to the control plane",
    );
  let token: string | undefined;
  return new AgentClient(
    agentAddress(config.agent.listen),
    () => {
      token ??= agentToken(config, source).value;
      return token;
    },
    timeoutMs,
    agentTlsOptions(config.listener),
  );
}
