import { join } from "node:path";
import type { Logger } from "pino";
import type { Outbox } from "../events/outbox.js";
import type { Metrics } from "../metrics/metrics.js";
import type { RouteService } from "../proxy/service.js";
import type { Db } from "../store/db.js";
import { canonicalJson } from "../util/canonical-json.js";
import { type InputIssue, InvalidInputError } from "../util/invalid-input.js";
import { settledWithin } from "../util/timers.js";
import { normalizeChecksum } from "./artifacts/authentication.js";
import { sourceProblem } from "./artifacts/source.js";
import { CrashMonitor } from "./crash-monitor.js";
import {
  OperatorNotConfiguredError,
  RunningInstanceUnavailableError,
  UpdateIdConflictError,
  UpdateInProgressError,
} from "./errors.js";
import type { UpdateErrorCode } from "./failure.js";
import { InstanceHealth } from "./instance-health.js";
import { Instances, isRunning } from "./instances.js";
import { BEFORE_SWITCH, UpdatePipeline } from "./pipeline.js";
import { RouteSync } from "./route-sync.js";
import type { ActiveInstance, OperatorUpdateRequest, RunningInstance, UpdateStatus } from "./schemas.js";
import { Slots } from "./slots.js";
import { OperatorStore, type UpdateRow } from "./store.js";
import { Switchover } from "./switchover.js";
import type { OperatorConfig, UpdateContext } from "./update-context.js";

export interface OperatorServiceOptions {
  db: Db;
  outbox: Outbox;
  routes: RouteService;
  config: OperatorConfig;
  dataDir: string;
  log: Logger;
  /** Source of the `AWS_*` credentials and of the few variables instances inherit; default `process.env`. */
  env?: NodeJS.ProcessEnv;
  metrics?: Metrics;
}

/**
 * Operator self-update. An update moves through these states, each recorded (with its `operator_update`
 * callback event) before the step it names:
 *
 *   queued -> downloading -> verifying -> starting -> health_checking      pipeline.ts
 *     -> switching -> draining -> completed                                switchover.ts
 *
 * Up to `health_checking` the old instance serves, and a failure ends the update `failed` with nothing of it
 * left running. From `switching` on, a failure switches back: `rolled_back`, or `failed` when there is
 * nothing to go back to or going back failed too. On start the agent adopts the instances still running and
 * picks up an update a previous run left unfinished: undone before its switch, finished or rolled back after.
 *
 * Two helpers work in the background: the crash monitor restarts a crashed active instance, and the route
 * sync keeps the route on the active slot. From its switch to its end an update pauses both.
 */
export class OperatorService {
  private readonly store: OperatorStore;
  private readonly health: InstanceHealth;
  private readonly route: RouteSync;
  private readonly monitor: CrashMonitor;
  private readonly pipeline: UpdatePipeline;
  private readonly switchover: Switchover;
  private readonly closing = new AbortController();
  private readonly routeId: string | undefined;
  /** The update (or the recovery of one) under way. */
  private job: Promise<void> | undefined;

  constructor(private readonly o: OperatorServiceOptions) {
    const c = o.config;
    const env = o.env ?? process.env;
    const signal = this.closing.signal;
    this.routeId = o.routes.operatorRouteId;
    this.store = new OperatorStore(o.db, o.outbox, o.log, o.metrics);
    const instances = new Instances({
      root: join(o.dataDir, "operator"),
      artifactName: c.artifactName,
      extraEnv: c.env,
      stopTimeoutMs: c.stopTimeoutMs,
      log: o.log,
      env,
    });
    const slots = new Slots(this.store, instances, c.ports);
    this.health = new InstanceHealth({
      store: this.store,
      instances,
      healthPath: c.healthPath,
      healthTimeoutMs: c.healthTimeoutMs,
      checkIntervalMs: c.checkIntervalMs,
      signal,
    });
    this.route = new RouteSync({
      routes: o.routes,
      store: this.store,
      upstreamFile: c.upstreamFile ?? join(o.dataDir, "operator", "upstream"),
      retryIntervalMs: c.checkIntervalMs,
      log: o.log,
    });
    this.monitor = new CrashMonitor({
      store: this.store,
      slots,
      checkIntervalMs: c.checkIntervalMs,
      restartBackoffMs: c.restartBackoffMs,
      updateUnderWay: () => this.job !== undefined,
      log: o.log,
    });
    const ctx: UpdateContext = {
      store: this.store,
      slots,
      instances,
      health: this.health,
      config: c,
      dataDir: o.dataDir,
      log: o.log,
      signal,
    };
    this.pipeline = new UpdatePipeline(ctx, env);
    this.switchover = new Switchover(ctx, this.route, this.monitor);
  }

  /**
   * Adopts running instances, starts the crash monitor and the route sync, and resumes an interrupted update
   * in the background (which pauses them again if it is past its switch).
   */
  start(): void {
    for (const s of this.store.slots())
      if (s.pid !== null && !isRunning(s)) this.store.clearProcess(s.slot, s.pid);
    // Without the operator's domain there is no route to keep, and no update to have started an instance.
    if (this.routeId !== undefined) {
      this.monitor.start();
      this.route.start();
    }
    const interrupted = this.store.running();
    if (interrupted)
      this.launch(interrupted.id, () => this.recover(interrupted, "agent_restarted", "the agent restarted"));
  }

  /** Stops the agent's own work; operator instances keep running. An unfinished update is picked up at the next start. */
  async close(): Promise<void> {
    const background = Promise.all([this.monitor.stop(), this.route.stop()]);
    this.closing.abort(new Error("the agent is stopping"));
    await settledWithin(Promise.all([background, this.job]), this.o.config.stopTimeoutMs + 5000);
  }

  /**
   * What is wrong with a request that the domain can tell (its release source), before anything starts; the
   * caller adds its own findings, so one answer names every bad field. Throws when no update can run at all.
   */
  inputIssues(body: OperatorUpdateRequest): InputIssue[] {
    this.requireConfigured();
    const source = this.sourceOf(body);
    return typeof source === "string" ? [] : [source];
  }

  /** Starts an update, or answers a repeated request with its current status. */
  request(body: OperatorUpdateRequest): UpdateStatus {
    this.requireConfigured();
    const source = this.sourceOf(body);
    if (typeof source !== "string") throw new InvalidInputError([source]);
    const checksum = normalizeChecksum(body.checksum);
    const request = canonicalJson({
      callback_url: body.callback_url,
      update_process_id: body.update_process_id,
      version: body.version,
      artifact_source: body.artifact_source ?? null,
      checksum: checksum ?? null,
    });
    const existing = this.store.find(body.update_process_id);
    if (existing) {
      if (existing.request === request) return this.store.status(existing);
      throw new UpdateIdConflictError(body.update_process_id);
    }
    const running = this.store.running();
    if (running) throw new UpdateInProgressError(running.id);
    const row = this.store.create({
      id: body.update_process_id,
      request,
      version: body.version,
      callback_url: body.callback_url,
      artifact_source: source,
      checksum: checksum ?? null,
    });
    this.launch(row.id, () => this.run(row.id));
    return this.store.status(row);
  }

  status(id: string): UpdateStatus {
    return this.store.status(this.store.get(id));
  }

  /** The active instance, checked live against its health path. */
  async runningInstance(): Promise<RunningInstance> {
    const a = this.store.active();
    if (!a?.version || !a.update_id || a.port === null || a.pid === null || !isRunning(a))
      throw new RunningInstanceUnavailableError(
        a?.version ? `the active ${a.slot} instance is not running` : "no operator instance is installed",
      );
    if (!(await this.health.check(a.port)))
      throw new RunningInstanceUnavailableError(
        `the active ${a.slot} instance (pid ${a.pid}) does not answer ${this.o.config.healthPath} with 2xx`,
      );
    return {
      slot: a.slot,
      version: a.version,
      port: a.port,
      pid: a.pid,
      started_at: a.started_at ?? "",
      health: { status: "healthy", checked_at: new Date().toISOString() },
      update_process_id: a.update_id,
    };
  }

  /**
   * The instance the operator's route points at as recorded, and whether its process runs; no health check,
   * so it answers at once (for the agent's status). Null when no operator is installed.
   */
  activeInstance(): ActiveInstance | null {
    const a = this.store.active();
    if (!a?.version) return null;
    return {
      slot: a.slot,
      version: a.version,
      port: a.port,
      pid: a.pid,
      running: isRunning(a),
      started_at: a.started_at,
      update_process_id: a.update_id,
    };
  }

  private requireConfigured(): void {
    if (this.routeId === undefined) throw new OperatorNotConfiguredError();
  }

  /** The release source the request names, else the community source; or what is wrong with it. */
  private sourceOf(body: OperatorUpdateRequest): string | InputIssue {
    const source = body.artifact_source ?? this.o.config.communitySource;
    if (source === undefined)
      return {
        field: "artifact_source",
        message: "is required: no community source is configured (HOSTKEEPER_OPERATOR_COMMUNITY_SOURCE)",
      };
    const problem = sourceProblem(source, this.o.config.allowHttp);
    return problem === undefined ? source : { field: "artifact_source", message: problem };
  }

  /**
   * Runs the job for update `id`; if it fails unexpectedly, that update (and no other: another may have been
   * requested once this one ended) is finished or undone like one a restart interrupted.
   */
  private launch(id: string, job: () => Promise<void>): void {
    this.job = job()
      .catch(async (err: unknown) => {
        this.o.log.error({ err, update: id }, "operator update failed unexpectedly; finishing or undoing it");
        const u = this.store.find(id);
        if (u && u.finished_at === null && !this.closing.signal.aborted)
          await this.recover(u, "internal_error", `an unexpected error (${(err as Error).message})`);
      })
      .catch((err: unknown) => this.o.log.error({ err }, "finishing or undoing the operator update failed"))
      .finally(() => {
        this.job = undefined;
      });
  }

  /** An update from `queued` to its end: the pipeline up to the health gate, then the switch. */
  private async run(id: string): Promise<void> {
    if (await this.pipeline.run(id)) await this.switchover.switchTo(id);
  }

  /** Finishes or undoes an update that was interrupted (`why`): undone before its switch, carried on after it. */
  private async recover(u: UpdateRow, code: UpdateErrorCode, why: string): Promise<void> {
    this.o.log.warn(
      { update: u.id, state: u.state, why },
      "finishing or undoing an interrupted operator update",
    );
    if (BEFORE_SWITCH.has(u.state)) await this.pipeline.abandon(u, code, why);
    else await this.switchover.resume(u, why);
  }
}
