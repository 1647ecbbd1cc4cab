import { createHash } from "node:crypto";
import { chmod, mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Outbox } from "../events/outbox.js";
import type { Metrics } from "../metrics/metrics.js";
import type { RouteService } from "../proxy/service.js";
import type { AppConfig } from "../settings.js";
import type { Db } from "../store/db.js";
import { canonicalJson } from "../util/canonical-json.js";
import { type InputIssue, InvalidInputError } from "../util/invalid-input.js";
import { fs } from "../util/node-builtins.js";
import { settledWithin, sleep } from "../util/timers.js";
import { CrashMonitor } from "./crash-monitor.js";
import { checksumFor, Downloader, hashFile } from "./download.js";
import {
  OperatorNotConfiguredError,
  RunningInstanceUnavailableError,
  UpdateIdConflictError,
  UpdateInProgressError,
} from "./errors.js";
import { type UpdateErrorCode, UpdateFailure } from "./failure.js";
import { moveIntoPlace } from "./files.js";
import { checkHealth, Instances, isRunning } from "./instances.js";
import {
  checkSignature,
  parseSignature,
  parseTrustedKeys,
  type Signature,
  type TrustedKey,
  verifyDigest,
} from "./minisign.js";
import { RouteSync } from "./route-sync.js";
import type {
  ActiveInstance,
  OperatorUpdateRequest,
  RunningInstance,
  UpdateState,
  UpdateStatus,
} from "./schemas.js";
import { Slots } from "./slots.js";
import { ArtifactSource, sourceProblem } from "./source.js";
import { OperatorStore, otherSlot, type Slot, type UpdateRow } from "./store.js";

const { readFileSync } = fs;

export interface OperatorServiceOptions {
  db: Db;
  outbox: Outbox;
  routes: RouteService;
  config: AppConfig["operator"];
  dataDir: string;
  log: Logger;
  /** Source of the `AWS_*` credentials and of the few variables instances inherit; default `process.env`. */
  env?: NodeJS.ProcessEnv;
  metrics?: Metrics;
}

/** States in which nothing has touched the operator's route yet. */
const BEFORE_SWITCH: ReadonlySet<UpdateState> = new Set([
  "queued",
  "downloading",
  "verifying",
  "starting",
  "health_checking",
]);
/** Failed health checks in a row, after the switch, that count as the new instance turning unhealthy. */
const WATCH_FAILURES = 3;
const HEALTH_REQUEST_TIMEOUT_MS = 2000;
const SHA256SUMS_MAX_BYTES = 1_048_576;
/** A `.minisig` is four short lines; anything much larger is not one. */
const MINISIG_MAX_BYTES = 4096;
const PROGRESS_EVERY_MS = 250;

const normalizeChecksum = (c: string | undefined) => c?.replace(/^sha256:/, "").toLowerCase();

/** How an artifact is authenticated when trusted keys are configured. */
type Authentication =
  | { signed: "artifact"; sig: Signature; key: TrustedKey; file: string }
  /** A signed SHA256SUMS, and the sha256 it lists for the artifact. */
  | { signed: "SHA256SUMS"; sig: Signature; key: TrustedKey; file: string; sha256: string };

function failureOf(err: unknown, fallback: UpdateErrorCode): UpdateFailure {
  if (err instanceof UpdateFailure) return err;
  return new UpdateFailure(fallback, (err as Error).message || String(err));
}

/**
 * Operator self-update. An update runs download -> verify -> start in the idle slot -> health gate -> switch
 * the operator's route -> drain and watch -> stop the old instance; each state is persisted (with its
 * callback event) before the step it names. A failure before the switch leaves the old instance serving; a
 * failure at or after it switches back. On start the agent adopts the instances still running and finishes
 * or undoes an update a previous run left unfinished.
 *
 * Two helpers work in the background: the crash monitor restarts a crashed active instance, and the route
 * sync keeps the route on the active slot. From its switch to its end an update pauses both (`inCharge`):
 * what runs and where the route points is then the update's alone.
 */
export class OperatorService {
  private readonly store: OperatorStore;
  private readonly instances: Instances;
  private readonly slots: Slots;
  private readonly source: ArtifactSource;
  private readonly downloader: Downloader;
  private readonly route: RouteSync;
  private readonly monitor: CrashMonitor;
  private readonly closing = new AbortController();
  private readonly routeId: string | undefined;
  private readonly trustedKeys: TrustedKey[];
  /** The update (or the recovery of one) under way. */
  private job: Promise<void> | undefined;

  constructor(private readonly o: OperatorServiceOptions) {
    const c = o.config;
    const env = o.env ?? process.env;
    this.routeId = o.routes.operatorRouteId;
    this.trustedKeys = parseTrustedKeys(c.trustedKeys);
    this.store = new OperatorStore(o.db, o.outbox, o.log, o.metrics);
    this.instances = new Instances({
      root: join(o.dataDir, "operator"),
      artifactName: c.artifactName,
      extraEnv: c.env,
      stopTimeoutMs: c.stopTimeoutMs,
      log: o.log,
      env,
    });
    this.source = new ArtifactSource({
      allowHttp: c.allowHttp,
      s3Endpoint: c.s3Endpoint,
      s3Region: c.s3Region,
      s3PathStyle: c.s3PathStyle,
      env,
    });
    this.downloader = new Downloader({
      source: this.source,
      extraCa: c.caFile === undefined ? undefined : readFileSync(c.caFile, "utf8"),
      maxBytes: c.maxArtifactBytes,
      idleTimeoutMs: c.downloadIdleTimeoutMs,
      totalTimeoutMs: c.downloadTimeoutMs,
      retries: c.downloadRetries,
      retryDelayMs: c.retryDelayMs,
    });
    this.slots = new Slots(this.store, this.instances, c.ports);
    this.route = new RouteSync({
      routes: o.routes,
      store: this.store,
      upstreamFile: c.upstreamFile ?? join(o.dataDir, "operator", "upstream"),
      retryIntervalMs: c.checkIntervalMs,
      log: o.log,
    });
    this.monitor = new CrashMonitor({
      store: this.store,
      slots: this.slots,
      checkIntervalMs: c.checkIntervalMs,
      restartBackoffMs: c.restartBackoffMs,
      updateUnderWay: () => this.job !== undefined,
      log: o.log,
    });
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

  async runningInstance(): Promise<RunningInstance> {
    const a = this.store.active();
    if (!a?.version || !a.update_id || a.port === null || a.pid === null || !isRunning(a))
      throw new RunningInstanceUnavailableError(
        a?.version ? `the active ${a.slot} instance is not running` : "no operator instance is installed",
      );
    const ok = await this.healthy(a.port);
    if (!ok)
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
   * so it answers at once (GET /v1/status). Null when no operator is installed.
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
        if (u && u.finished_at === null && !this.aborted)
          await this.recover(u, "internal_error", `an unexpected error (${(err as Error).message})`);
      })
      .catch((err: unknown) => this.o.log.error({ err }, "finishing or undoing the operator update failed"))
      .finally(() => {
        this.job = undefined;
      });
  }

  /** Download to verify to health gate; then the switch. */
  private async run(id: string): Promise<void> {
    const active = this.store.active();
    const previous = active?.version ? active : undefined;
    const target: Slot = previous ? otherSlot(previous.slot) : "blue";
    const tmp = this.downloadPath(id);
    let started = false;
    try {
      const u = this.store.get(id);
      const url = this.source.locate(u.artifact_source, u.version, this.o.config.artifactName);
      this.store.transition(id, "downloading", {
        artifact_url: url.toString(),
        previous_slot: previous?.slot ?? null,
        previous_version: previous?.version ?? null,
        new_slot: target,
      });
      const auth = this.trustedKeys.length > 0 ? await this.authentication(u) : undefined;
      // A signed artifact needs no checksum; otherwise the request's, else the (signed) SHA256SUMS's.
      const expected =
        u.checksum ??
        (auth === undefined
          ? await this.listedChecksum(u)
          : auth.signed === "SHA256SUMS"
            ? auth.sha256
            : null);
      await mkdir(join(this.o.dataDir, "operator", "downloads"), { recursive: true, mode: 0o700 });
      let reported = 0;
      await this.downloader.toFile(
        url,
        tmp,
        (done, total) => {
          if (Date.now() - reported < PROGRESS_EVERY_MS && done !== total) return;
          reported = Date.now();
          this.store.setProgress(id, done, total);
        },
        this.closing.signal,
      );
      this.store.transition(id, "verifying", { checksum: expected });
      const hashes = await hashFile(tmp, ["sha256", "blake2b512"]);
      const actual = hashes.sha256.toString("hex");
      if (u.checksum !== null && actual !== u.checksum)
        throw new UpdateFailure(
          "checksum_mismatch",
          `the artifact's sha256 is ${actual}, expected ${u.checksum}`,
        );
      if (auth?.signed === "SHA256SUMS" && actual !== auth.sha256)
        throw new UpdateFailure(
          "signature_mismatch",
          `the artifact's sha256 is ${actual}, but the signed ${auth.file} lists ${auth.sha256}: it was changed after signing`,
        );
      if (auth?.signed === "artifact") verifyDigest(auth.sig, auth.key, hashes.blake2b512, "the artifact");
      if (auth === undefined && actual !== expected)
        throw new UpdateFailure(
          "checksum_mismatch",
          `the artifact's sha256 is ${actual}, expected ${expected}`,
        );
      await this.slots.stop(target);
      try {
        await mkdir(this.instances.slotDir(target), { recursive: true, mode: 0o700 });
        await chmod(tmp, 0o755);
        await moveIntoPlace(tmp, this.instances.executable(target));
      } catch (err) {
        throw failureOf(err, "install_failed");
      }
      this.store.setInstalled(target, u.version, id);
      this.store.transition(
        id,
        "starting",
        auth === undefined
          ? {}
          : {
              signature_key_id: auth.key.id,
              signature_file: auth.file,
              signature_comment: auth.sig.trustedComment,
            },
      );
      started = true;
      this.slots.start(target);
      this.store.transition(id, "health_checking");
      await this.gate(target, this.o.config.healthTimeoutMs);
    } catch (err) {
      if (this.aborted) return;
      const f = failureOf(err, "download_failed");
      this.o.log.warn(
        { update: id, code: f.code, err: f.message },
        "operator update failed before the switch",
      );
      if (started) await this.slots.stop(target);
      await rm(tmp, { force: true });
      this.store.transition(id, "failed", { error_code: f.code, error_message: f.message });
      return;
    }
    this.store.transition(id, "switching");
    await this.inCharge(() => this.switchAndWatch(id));
  }

  /** Points the route at the new slot, then drains the old instance and watches the new one. */
  private async switchAndWatch(id: string): Promise<void> {
    const u = this.store.get(id);
    this.store.setActive(u.new_slot);
    try {
      await this.route.sync();
    } catch (err) {
      return this.rollback(
        id,
        "switch_failed",
        `switching the operator's route failed: ${(err as Error).message}`,
      );
    }
    if (u.state === "switching") this.store.transition(id, "draining");
    await this.watch(id);
  }

  /**
   * After the switch: the old instance gets no new requests, finishes its in-flight ones and stays ready to
   * switch back to for the drain time; the new one must stay alive and healthy for the watch period.
   */
  private async watch(id: string): Promise<void> {
    const u = this.store.get(id);
    const target = u.new_slot as Slot;
    const { drainMs, watchMs, checkIntervalMs } = this.o.config;
    const since = Date.now();
    let oldStopped = u.previous_slot === null;
    let failures = 0;
    for (;;) {
      const row = this.store.slot(target);
      if (!isRunning(row))
        return this.rollback(
          id,
          "new_instance_failed",
          `the new instance exited ${Date.now() - since} ms after the switch`,
        );
      failures = row.port !== null && (await this.healthy(row.port)) ? 0 : failures + 1;
      if (failures >= WATCH_FAILURES)
        return this.rollback(
          id,
          "new_instance_failed",
          `the new instance failed ${WATCH_FAILURES} health checks in a row after the switch`,
        );
      const elapsed = Date.now() - since;
      if (!oldStopped && elapsed >= drainMs && u.previous_slot) {
        await this.slots.stop(u.previous_slot);
        oldStopped = true;
      }
      if (oldStopped && elapsed >= watchMs) break;
      try {
        await sleep(checkIntervalMs, this.closing.signal);
      } catch {
        return;
      }
    }
    this.store.transition(id, "completed", { error_code: null, error_message: null });
  }

  /**
   * Goes back to the previous instance: restarts it if it is gone, points the route at it, stops the new
   * one. The reason is recorded first, so an agent restart in the middle carries the rollback on.
   */
  private async rollback(id: string, code: UpdateErrorCode, message: string): Promise<void> {
    this.store.setError(id, code, message);
    const u = this.store.get(id);
    const neu = u.new_slot as Slot;
    const old = u.previous_slot;
    this.o.log.warn(
      { update: id, code, err: message },
      "operator update failed after the switch; switching back",
    );
    try {
      if (old === null) {
        // A first install has nothing to go back to: the route answers 503 rather than pointing at a dead port.
        await this.slots.stop(neu);
        this.store.setActive(null);
        await this.route.sync();
        this.store.transition(id, "failed");
        return;
      }
      if (!isRunning(this.store.slot(old))) {
        this.slots.start(old);
        await this.gate(old, this.o.config.healthTimeoutMs);
      }
      this.store.setActive(old);
      await this.route.sync();
      await this.slots.stop(neu);
      this.store.transition(id, "rolled_back");
    } catch (err) {
      if (this.aborted) return;
      // Once the update has ended, the route sync points the route at the active slot until that succeeds,
      // and the crash monitor keeps the active instance running and stops the one beside it.
      this.store.transition(id, "failed", {
        error_code: "rollback_failed",
        error_message: `${message}; switching back failed: ${(err as Error).message}`,
      });
    }
  }

  /**
   * Finishes or undoes an update that was interrupted (`why`): before the switch it is undone; after it,
   * finished when the new instance is (or becomes, within the health time-out) healthy, else rolled back.
   */
  private async recover(u: UpdateRow, code: UpdateErrorCode, why: string): Promise<void> {
    this.o.log.warn(
      { update: u.id, state: u.state, why },
      "finishing or undoing an interrupted operator update",
    );
    if (BEFORE_SWITCH.has(u.state)) {
      if (u.new_slot && this.store.slot(u.new_slot).update_id === u.id) await this.slots.stop(u.new_slot);
      await rm(this.downloadPath(u.id), { force: true });
      this.store.transition(u.id, "failed", {
        error_code: code,
        error_message: `${why} during ${u.state}; the update was abandoned before the switch and the previous instance kept serving`,
      });
      return;
    }
    await this.inCharge(async () => {
      const neu = u.new_slot as Slot;
      const problem =
        u.error_message ??
        (await this.gate(neu, this.o.config.healthTimeoutMs).then(
          () => undefined,
          (err: Error) => `${why} during ${u.state} and the new instance was not healthy: ${err.message}`,
        ));
      if (this.aborted) return;
      if (problem !== undefined)
        return await this.rollback(u.id, u.error_code ?? "new_instance_failed", problem);
      await this.switchAndWatch(u.id);
    });
  }

  /**
   * Runs `step`, from an update's switch to its end, with the crash monitor and the route sync paused: what
   * runs and where the route points is the update's alone then. Pausing waits for a check or a sync already
   * under way, so none of theirs lands in the middle of the switch.
   */
  private async inCharge(step: () => Promise<void>): Promise<void> {
    await Promise.all([this.monitor.pause(), this.route.pause()]);
    try {
      await step();
    } finally {
      this.monitor.resume();
      this.route.resume();
    }
  }

  /** Waits for the slot's instance to answer its health path, failing when it exits or time runs out. */
  private async gate(slot: Slot, timeoutMs: number): Promise<void> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const row = this.store.slot(slot);
      if (!isRunning(row))
        throw new UpdateFailure(
          "start_failed",
          `the ${slot} instance exited before it was healthy; see ${join(this.instances.slotDir(slot), "output.log")}`,
        );
      if (row.port !== null && (await this.healthy(row.port))) return;
      if (Date.now() >= end)
        throw new UpdateFailure(
          "health_check_failed",
          `the ${slot} instance did not answer ${this.o.config.healthPath} with 2xx within ${timeoutMs} ms`,
        );
      await sleep(this.o.config.checkIntervalMs, this.closing.signal);
    }
  }

  /** The checksum `<source>/<version>/SHA256SUMS` lists for the artifact; without one, no update. */
  private async listedChecksum(u: UpdateRow): Promise<string> {
    const name = this.o.config.artifactName;
    const url = this.source.locate(u.artifact_source, u.version, "SHA256SUMS");
    const text = await this.downloader.text(url, SHA256SUMS_MAX_BYTES, this.closing.signal);
    if (text === undefined)
      throw new UpdateFailure(
        "checksum_unavailable",
        `the request has no checksum and ${url} does not exist`,
      );
    const sum = checksumFor(text, name);
    if (!sum) throw new UpdateFailure("checksum_unavailable", `${url} does not list ${name}`);
    return sum;
  }

  /**
   * With trusted keys: `<artifact>.minisig`, else `SHA256SUMS.minisig` with the `SHA256SUMS` it signs (checked
   * here, as it is small, and the artifact's sha256 taken from it). Either signature must be by a trusted key
   * with an intact trusted comment. The artifact itself is checked once downloaded.
   */
  private async authentication(u: UpdateRow): Promise<Authentication> {
    const name = this.o.config.artifactName;
    const fetch = async (file: string, max: number, absent?: number[]) => {
      const url = this.source.locate(u.artifact_source, u.version, file);
      return { url, bytes: await this.downloader.small(url, max, this.closing.signal, absent) };
    };
    // Probed: a bucket answers 403 for a missing key to a reader without the right to list it.
    const own = await fetch(`${name}.minisig`, MINISIG_MAX_BYTES, [403, 404]);
    if (own.bytes !== undefined) {
      const sig = parseSignature(own.bytes.toString("utf8"), `${name}.minisig`);
      return {
        signed: "artifact",
        sig,
        key: checkSignature(sig, this.trustedKeys, `${name}.minisig`),
        file: name,
      };
    }
    const sums = await fetch("SHA256SUMS.minisig", MINISIG_MAX_BYTES);
    if (sums.bytes === undefined)
      throw new UpdateFailure(
        "signature_missing",
        `trusted keys are configured, and neither ${own.url} nor ${sums.url} exists`,
      );
    const sig = parseSignature(sums.bytes.toString("utf8"), "SHA256SUMS.minisig");
    const key = checkSignature(sig, this.trustedKeys, "SHA256SUMS.minisig");
    const list = await fetch("SHA256SUMS", SHA256SUMS_MAX_BYTES);
    if (list.bytes === undefined)
      throw new UpdateFailure("signature_missing", `${sums.url} exists but ${list.url} does not`);
    // The signature is over the file's bytes as published, not over a decoding of them.
    verifyDigest(sig, key, createHash("blake2b512").update(list.bytes).digest(), "SHA256SUMS");
    const sha256 = checksumFor(list.bytes.toString("utf8"), name);
    if (!sha256)
      throw new UpdateFailure("checksum_unavailable", `the signed ${list.url} does not list ${name}`);
    return { signed: "SHA256SUMS", sig, key, file: "SHA256SUMS", sha256 };
  }

  private healthy(port: number): Promise<boolean> {
    const timeout = Math.min(HEALTH_REQUEST_TIMEOUT_MS, this.o.config.healthTimeoutMs);
    return checkHealth(port, this.o.config.healthPath, timeout);
  }

  private downloadPath(id: string): string {
    return join(this.o.dataDir, "operator", "downloads", `${id}.part`);
  }

  private get aborted(): boolean {
    return this.closing.signal.aborted;
  }
}
