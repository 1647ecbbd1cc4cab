import { randomUUID } from "node:crypto";
import { rm } from "node:fs/promises";
import type { Logger } from "pino";
import type { Outbox } from "../events/outbox.js";
import { normalizeChecksum } from "../operator/artifacts/authentication.js";
import { sourceProblem } from "../operator/artifacts/source.js";
import type { AppConfig } from "../settings.js";
import type { Db } from "../store/db.js";
import { canonicalJson } from "../util/canonical-json.js";
import { type InputIssue, InvalidInputError } from "../util/invalid-input.js";
import { Periodic } from "../util/periodic.js";
import { settledWithin } from "../util/timers.js";
import {
  AgentUpdateInProgressError,
  AgentUpdateNotConfiguredError,
  AgentUpdateUnsupportedError,
} from "./errors.js";
import { failureOf } from "./failure.js";
import { PackageFetch, type PackageRef, refOfUrl } from "./fetch.js";
import { updateDir } from "./handoff.js";
import { type HostFacts, HostPackages, packageFileName } from "./host.js";
import { prepare } from "./prepare.js";
import type { AgentUpdateRequest, AgentUpdateStatus } from "./schemas.js";
import { AgentUpdateStore } from "./store.js";
import { reconcile, unitName } from "./watch.js";

export interface AgentUpdateServiceOptions {
  db: Db;
  outbox: Outbox;
  config: Pick<AppConfig, "agent" | "operator" | "agentUpdate">;
  log: Logger;
  host?: HostPackages;
  /** Where the object-storage credentials are read; default `process.env`. */
  env?: NodeJS.ProcessEnv;
}

/** How often an update handed to its updater is looked at. */
const WATCH_MS = 1000;

/**
 * The agent's self-update. An update moves `downloading` -> `verifying` (prepare.ts: nothing on the host
 * changes) -> `installing` (the updater, in a transient systemd unit, installs the package; the package's
 * scripts restart the agent) -> `restarting` (the new agent must say it is ready with the new version) ->
 * `completed`; else the updater installs the running version's package again: `rolled_back`, or `failed`
 * when that fails too. From `installing` on, whichever agent runs watches the updater (watch.ts).
 */
export class AgentUpdateService {
  private readonly store: AgentUpdateStore;
  private readonly host: HostPackages;
  private readonly fetch: PackageFetch;
  private readonly closing = new AbortController();
  private job: Promise<void> | undefined;
  /** Looks at an update handed to its updater; rounds only while one is under way. */
  private readonly watcher: Periodic;
  private ready: () => Promise<boolean> = async () => false;

  constructor(private readonly o: AgentUpdateServiceOptions) {
    this.store = new AgentUpdateStore(o.db, o.outbox, o.log);
    this.host = o.host ?? new HostPackages();
    const { operator, agentUpdate } = o.config;
    this.watcher = new Periodic({
      round: () => this.look(),
      what: "looking at the agent's updater",
      log: o.log,
    });
    this.fetch = new PackageFetch(operator, agentUpdate.keys, o.env ?? process.env, this.closing.signal);
  }

  /** Picks up an update a previous run left: one cut off before its install failed; one after it is watched. */
  start(ready: () => Promise<boolean>): void {
    this.ready = ready;
    this.watcher.start();
    const row = this.store.unfinished();
    if (row === undefined) return;
    if (row.state === "downloading" || row.state === "verifying") {
      this.store.transition(row.id, "failed", {
        error_code: "agent_restarted",
        error_message: `the agent restarted during ${row.state}; nothing was installed`,
      });
      void rm(updateDir(this.o.config.agent.dataDir, row.id), { recursive: true, force: true });
      return;
    }
    this.watcher.soon();
  }

  async close(): Promise<void> {
    this.closing.abort(new Error("the agent is stopping"));
    await settledWithin(Promise.all([this.watcher.stop(), this.job]), 10_000);
  }

  /** Starts an update: refused without keys, outside the packaged service, or while another is under way. */
  async request(body: AgentUpdateRequest): Promise<AgentUpdateStatus> {
    if (this.o.config.agentUpdate.keys.length === 0) throw new AgentUpdateNotConfiguredError();
    const facts = await this.host.facts();
    if (typeof facts === "string") throw new AgentUpdateUnsupportedError(facts);
    const ref = this.target(body, facts);
    const running = this.store.unfinished();
    if (running) throw new AgentUpdateInProgressError(running.id);
    const row = this.store.create({
      id: `au_${randomUUID().replaceAll("-", "").slice(0, 16)}`,
      request: canonicalJson(body),
      from_version: this.host.runningVersion,
      to_version: body.version ?? null,
      package_url: this.fetch.locate(ref).toString(),
      package_format: facts.format,
      architecture: facts.arch,
      checksum: ref.checksum,
      allow_downgrade: body.allow_downgrade ? 1 : 0,
      callback_url: body.callback_url ?? null,
    });
    this.job = this.run(row.id, ref, facts, body.allow_downgrade === true).finally(() => {
      this.job = undefined;
    });
    return this.store.status(row);
  }

  status(id: string): AgentUpdateStatus {
    return this.store.status(this.store.get(id));
  }

  /** The newest update, for the agent's status; null before the first. */
  newest(): AgentUpdateStatus | null {
    const row = this.store.newest();
    return row === undefined ? null : this.store.status(row);
  }

  private async run(id: string, ref: PackageRef, facts: HostFacts, allowDowngrade: boolean): Promise<void> {
    const { agent, agentUpdate } = this.o.config;
    const ctx = {
      store: this.store,
      host: this.host,
      fetch: this.fetch,
      dataDir: agent.dataDir,
      defaultSource: agentUpdate.source,
      timeoutS: agentUpdate.timeoutS,
      log: this.o.log,
    };
    try {
      const dir = await prepare(ctx, id, ref, facts, allowDowngrade);
      const unit = unitName(id, 1);
      this.store.transition(id, "installing", { updater_unit: unit });
      await this.host.launch(unit, dir);
      this.watcher.soon();
    } catch (err) {
      if (this.closing.signal.aborted) return;
      const f = failureOf(err);
      const state = this.store.get(id).state;
      this.store.transition(id, "failed", {
        error_code: f.code === "internal_error" && state === "installing" ? "updater_failed" : f.code,
        error_message: f.message,
      });
      await rm(updateDir(agent.dataDir, id), { recursive: true, force: true });
    }
  }

  /** The package a request names; every bad field in one `InvalidInputError`. */
  private target(body: AgentUpdateRequest, facts: HostFacts): PackageRef {
    const allowHttp = this.o.config.operator.allowHttp;
    const issues: InputIssue[] = [];
    const checksum = normalizeChecksum(body.checksum) ?? null;
    if ((body.version === undefined) === (body.url === undefined))
      issues.push({ field: "version", message: "and url: give exactly one of them" });
    if (body.url !== undefined && body.artifact_source != null)
      issues.push({ field: "artifact_source", message: "goes with version, not with url" });
    if (body.url !== undefined) {
      const problem = sourceProblem(body.url, allowHttp);
      if (problem) issues.push({ field: "url", message: problem });
      else if (!body.url.endsWith(`.${facts.format}`))
        issues.push({
          field: "url",
          message: `must name a .${facts.format} package: this host's agent is installed from one`,
        });
    }
    const source = body.artifact_source ?? this.o.config.agentUpdate.source;
    if (body.version !== undefined) {
      if (source === undefined)
        issues.push({
          field: "artifact_source",
          message: "is needed: HOSTKEEPER_AGENT_UPDATE_SOURCE is not set",
        });
      else {
        const problem = sourceProblem(source, allowHttp);
        if (problem) issues.push({ field: "artifact_source", message: problem });
      }
    }
    if (issues.length > 0) throw new InvalidInputError(issues);
    if (body.url !== undefined) return refOfUrl(body.url, checksum);
    const version = body.version as string;
    return {
      source: source as string,
      version,
      file: packageFileName(facts.format, version, facts.arch),
      checksum,
    };
  }

  /**
   * One look at the update handed to its updater (watch.ts); the next in a second while one is under way,
   * none after (`soon` starts the looks again). A failed look is logged and tried again.
   */
  private async look(): Promise<number | undefined> {
    const row = this.store.unfinished();
    if (row === undefined || (row.state !== "installing" && row.state !== "restarting")) return undefined;
    try {
      const { store, host, ready } = this;
      await reconcile({ ...this.o, store, host, dataDir: this.o.config.agent.dataDir, ready }, row);
    } catch (err) {
      this.o.log.warn({ err }, "agent update: looking at the updater failed");
    }
    return WATCH_MS;
  }
}
