import { chmod, mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { ArtifactAuthentication, type Authentication } from "./artifacts/authentication.js";
import type { Downloader } from "./artifacts/download.js";
import { moveIntoPlace } from "./artifacts/files.js";
import { parseTrustedKeys } from "./artifacts/minisign.js";
import type { ArtifactSource } from "./artifacts/source.js";
import { artifactTransport } from "./artifacts/transport.js";
import { type UpdateErrorCode, UpdateFailure } from "./failure.js";
import type { UpdateState } from "./schemas.js";
import { otherSlot, type Slot, type SlotRow, type UpdateRow } from "./store.js";
import type { UpdateContext } from "./update-context.js";

/** The pipeline's states: nothing has touched the operator's route yet. */
export const BEFORE_SWITCH: ReadonlySet<UpdateState> = new Set([
  "queued",
  "downloading",
  "verifying",
  "starting",
  "health_checking",
]);
const PROGRESS_EVERY_MS = 250;

function failureOf(err: unknown, fallback: UpdateErrorCode): UpdateFailure {
  if (err instanceof UpdateFailure) return err;
  return new UpdateFailure(fallback, (err as Error).message || String(err));
}

/**
 * An update up to its switch: `downloading` (and fetching what authenticates the artifact) -> `verifying`
 * (and installing into the idle slot) -> `starting` -> `health_checking`. Each state is recorded before the
 * step it names. The previous instance serves throughout; a failure stops what the update started, removes
 * its download and ends the update `failed`.
 */
export class UpdatePipeline {
  private readonly source: ArtifactSource;
  private readonly downloader: Downloader;
  private readonly authentication: ArtifactAuthentication;

  /** `env`: where the object-storage credentials are read. */
  constructor(
    private readonly ctx: UpdateContext,
    env: NodeJS.ProcessEnv,
  ) {
    const c = ctx.config;
    ({ source: this.source, downloader: this.downloader } = artifactTransport(c, env));
    this.authentication = new ArtifactAuthentication({
      source: this.source,
      downloader: this.downloader,
      artifactName: c.artifactName,
      trustedKeys: parseTrustedKeys(c.trustedKeys),
      signal: ctx.signal,
    });
  }

  /** Runs update `id` up to its switch; true once its new instance is healthy, so the switch may start. */
  async run(id: string): Promise<boolean> {
    const active = this.ctx.store.active();
    const previous = active?.version ? active : undefined;
    const target: Slot = previous ? otherSlot(previous.slot) : "blue";
    const tmp = this.downloadPath(id);
    try {
      const { u, auth } = await this.download(id, previous, target, tmp);
      await this.install(u, target, tmp, auth);
    } catch (err) {
      return this.fail(id, tmp, err);
    }
    try {
      this.ctx.slots.start(target);
      this.ctx.store.transition(id, "health_checking");
      await this.ctx.health.gate(target, this.ctx.config.healthTimeoutMs);
    } catch (err) {
      return this.fail(id, tmp, err, target);
    }
    return true;
  }

  /** Undoes an update a restart interrupted before its switch: the previous instance kept serving. */
  async abandon(u: UpdateRow, code: UpdateErrorCode, why: string): Promise<void> {
    const { store, slots } = this.ctx;
    if (u.new_slot && store.slot(u.new_slot).update_id === u.id) await slots.stop(u.new_slot);
    await rm(this.downloadPath(u.id), { force: true });
    store.transition(u.id, "failed", {
      error_code: code,
      error_message: `${why} during ${u.state}; the update was abandoned before the switch and the previous instance kept serving`,
    });
  }

  /** `downloading` -> `verifying`: the artifact in `tmp`, checked against its checksum or signature. */
  private async download(
    id: string,
    previous: SlotRow | undefined,
    target: Slot,
    tmp: string,
  ): Promise<{ u: UpdateRow; auth: Authentication | undefined }> {
    const { store, config } = this.ctx;
    const u = store.get(id);
    const url = this.source.locate(u.artifact_source, u.version, config.artifactName);
    store.transition(id, "downloading", {
      artifact_url: url.toString(),
      previous_slot: previous?.slot ?? null,
      previous_version: previous?.version ?? null,
      new_slot: target,
    });
    const auth = await this.authentication.authenticate(u);
    const expected = await this.authentication.expectedChecksum(u, auth);
    await mkdir(join(this.ctx.dataDir, "operator", "downloads"), { recursive: true, mode: 0o700 });
    let reported = 0;
    await this.downloader.toFile(
      url,
      tmp,
      (done, total) => {
        if (Date.now() - reported < PROGRESS_EVERY_MS && done !== total) return;
        reported = Date.now();
        store.setProgress(id, done, total);
      },
      this.ctx.signal,
    );
    store.transition(id, "verifying", { checksum: expected });
    await this.authentication.verify(tmp, u, expected, auth);
    return { u, auth };
  }

  /** Puts the verified artifact into the idle slot (stopping what ran there), then `starting`. */
  private async install(
    u: UpdateRow,
    target: Slot,
    tmp: string,
    auth: Authentication | undefined,
  ): Promise<void> {
    const { store, slots, instances } = this.ctx;
    await slots.stop(target);
    try {
      await mkdir(instances.slotDir(target), { recursive: true, mode: 0o700 });
      await chmod(tmp, 0o755);
      await moveIntoPlace(tmp, instances.executable(target));
    } catch (err) {
      throw failureOf(err, "install_failed");
    }
    store.setInstalled(target, u.version, u.id);
    store.transition(
      u.id,
      "starting",
      auth === undefined
        ? {}
        : {
            signature_key_id: auth.key.id,
            signature_file: auth.file,
            signature_comment: auth.sig.trustedComment,
          },
    );
  }

  /** Ends the update `failed`, after stopping the instance it started in `started`, if any. */
  private async fail(id: string, tmp: string, err: unknown, started?: Slot): Promise<false> {
    if (this.ctx.signal.aborted) return false;
    const f = failureOf(err, "download_failed");
    this.ctx.log.warn(
      { update: id, code: f.code, err: f.message },
      "operator update failed before the switch",
    );
    if (started) await this.ctx.slots.stop(started);
    await rm(tmp, { force: true });
    this.ctx.store.transition(id, "failed", { error_code: f.code, error_message: f.message });
    return false;
  }

  private downloadPath(id: string): string {
    return join(this.ctx.dataDir, "operator", "downloads", `${id}.part`);
  }
}
