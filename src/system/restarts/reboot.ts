import { once } from "node:events";
import type { Logger } from "pino";
import type { Db } from "../../store/db.js";
import { CHILD_ENV, childEnv, spawnChild } from "../../util/child-env.js";
import { settledWithin } from "../../util/timers.js";
import { type ApplyRow, type ApplyStore, changesOf, newRebootReport, rebootReportOf } from "../applies.js";
import { type Hooks, linesOfChanges } from "../hooks/hooks.js";
import type { PackageManager } from "../packages/package-manager.js";
import type { RebootReport } from "../schemas.js";
import { type Boot, BootLog, type BootSources, currentBoot } from "./boot.js";

export interface RebootsOptions {
  db: Db;
  store: ApplyStore;
  /** Asked, in a new boot, whether a reboot is still required. */
  manager: Pick<PackageManager, "rebootRequired">;
  command: readonly string[];
  /** Between the end of the apply that schedules a reboot and the reboot command. */
  delayMs: number;
  /** Where the boot id and the running kernel are read. */
  boot: BootSources;
  env: NodeJS.ProcessEnv;
  /** The host's hooks: post-reboot ones run once the reboot of an apply is reported. */
  hooks: Pick<Hooks, "run">;
  /** The clock of the applies' times (and of the windows' ends a reboot must come before). */
  now: () => number;
  log: Logger;
}

/** The host's boot as `GET /v1/status` shows it. */
export interface BootStatus {
  boot_id: string | null;
  booted_at: string | null;
  kernel: string | null;
  last_reboot: {
    previous_boot_id: string;
    detected_at: string;
    planned: boolean;
    apply_id: number | null;
  } | null;
}

/** How long the start in a new boot waits to learn whether a reboot is still required. */
const BACK_ONLINE_CHECK_MS = 30_000;

const CANCELLED_REBOOT = "the agent stopped before the reboot was due; the reboot command did not run";

/**
 * The reboot that follows an apply and the boots it leads to. An apply that ends with a reboot scheduled
 * starts the delay here; the reboot command then runs unless the agent stops first. At the agent's start
 * the boot it runs in is recorded, which tells whether the scheduled reboot happened (`back_online`).
 */
export class Reboots {
  private readonly boots: BootLog;
  /** The apply whose reboot is scheduled, until the reboot command starts. */
  private pending: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private child: ReturnType<typeof spawnChild> | undefined;
  private closed = false;
  /** The post-reboot hooks under way, if any. */
  private postReboot: Promise<void> = Promise.resolve();

  constructor(private readonly o: RebootsOptions) {
    this.boots = new BootLog(o.db);
  }

  /**
   * Records the boot the agent runs in. In a new boot, the applies whose reboot was scheduled in an earlier
   * one are `back_online`; a new boot without such an apply is an unplanned reboot. In the same boot, a
   * reboot scheduled by a run of the agent that stopped before it was due did not happen.
   */
  async recordBoot(): Promise<void> {
    const boot = currentBoot(this.o.boot);
    if (boot === undefined) return;
    const last = this.boots.last();
    if (last?.boot_id === boot.boot_id) {
      for (const row of this.o.store.inStates(["reboot_scheduled"]))
        this.o.store.transitionReboot(row, "completed", { error: CANCELLED_REBOOT });
      return;
    }
    const rebooted = this.o.store
      .inStates(["reboot_scheduled", "rebooting"])
      .filter((r) => rebootReportOf(r).boot_id_before !== boot.boot_id);
    const planned = rebooted.at(-1);
    const stillRequired = planned === undefined ? null : await this.stillRequired();
    const now = new Date(this.o.now()).toISOString();
    this.o.db.transaction(() => {
      this.boots.record(boot, last?.boot_id ?? null, planned?.id ?? null);
      for (const row of rebooted)
        this.o.store.transitionReboot(row, "back_online", {
          boot_id_after: boot.boot_id,
          kernel_after: boot.kernel,
          back_online_at: now,
          reboot_required_after: row === planned ? stillRequired : null,
        });
    })();
    if (planned !== undefined) {
      this.logBackOnline(planned, boot);
      this.postReboot = this.runPostReboot(planned);
    } else if (last !== undefined)
      this.o.log.warn(
        { boot_id: boot.boot_id, previous_boot_id: last.boot_id, booted_at: boot.booted_at },
        "the host rebooted without a reboot scheduled by the agent",
      );
  }

  /**
   * The post-reboot hooks of the apply whose reboot this boot ends, after its report-back (`back_online`),
   * once: a start in the same boot finds no new boot. They join the apply's hooks; its event goes again.
   */
  private async runPostReboot(row: ApplyRow): Promise<void> {
    try {
      const records = await this.o.hooks.run("post-reboot", {
        applyId: row.id,
        updateType: row.update_type,
        trigger: row.trigger,
        packages: linesOfChanges(changesOf(row.result)),
        outcome: "succeeded",
      });
      if (records.length === 0 || this.closed) return;
      this.o.store.addHooks(row.id, records);
      this.o.store.announce(row.id);
    } catch (err) {
      this.o.log.error({ err, apply_id: row.id }, "the post-reboot hooks could not be run or recorded");
    }
  }

  /** Whether a reboot is still required; null when the package manager cannot say in time (the start waits). */
  private async stillRequired(): Promise<boolean | null> {
    let required: boolean | null = null;
    const asked = this.o.manager.rebootRequired().then(
      (v) => {
        required = v;
      },
      () => undefined,
    );
    await settledWithin(asked, BACK_ONLINE_CHECK_MS);
    return required;
  }

  private logBackOnline(planned: ApplyRow, boot: Boot): void {
    this.o.log.info(
      {
        apply_id: planned.id,
        boot_id: boot.boot_id,
        kernel_before: rebootReportOf(planned).kernel_before,
        kernel_after: boot.kernel,
      },
      `the host is back online after the reboot of apply ${planned.id}`,
    );
  }

  /** The boot the agent runs in and the last reboot it noticed. */
  bootStatus(): BootStatus {
    const boot = currentBoot(this.o.boot);
    const seen = this.boots.last();
    const current = seen !== undefined && seen.boot_id === boot?.boot_id ? seen : undefined;
    const reboot = this.boots.lastReboot();
    return {
      boot_id: boot?.boot_id ?? null,
      booted_at: current?.booted_at ?? boot?.booted_at ?? null,
      kernel: boot?.kernel ?? null,
      last_reboot:
        reboot?.previous_boot_id == null
          ? null
          : {
              previous_boot_id: reboot.previous_boot_id,
              detected_at: reboot.seen_at,
              planned: reboot.planned_apply_id !== null,
              apply_id: reboot.planned_apply_id,
            },
    };
  }

  /** Whether a reboot scheduled now would run before `by` (ms since the epoch). */
  dueBefore(by: number): boolean {
    return this.o.now() + this.o.delayMs < by;
  }

  /** What an apply that schedules a reboot now records: when the reboot is due, and the boot it leaves. */
  plan(): { reboot_at: string; reboot: RebootReport } {
    const boot = currentBoot(this.o.boot);
    return {
      reboot_at: new Date(this.o.now() + this.o.delayMs).toISOString(),
      reboot: newRebootReport({ boot_id: boot?.boot_id ?? null, kernel: boot?.kernel ?? null }),
    };
  }

  /**
   * Schedules the reboot of apply `id`, just recorded `reboot_scheduled` with `plan()`, as the apply ends.
   * The delay starts on the next turn of the event loop: the result of a synchronous apply is handed back
   * (and its response written) first.
   */
  schedule(id: number): void {
    this.pending = id;
    setImmediate(() => this.startDelay());
  }

  private startDelay(): void {
    if (this.closed || this.timer !== undefined || this.pending === undefined) return;
    this.o.log.warn({ delayMs: this.o.delayMs }, "a reboot is required; rebooting after the delay");
    this.timer = setTimeout(() => this.reboot(), this.o.delayMs);
  }

  /**
   * Cancels a pending reboot (its apply is then `completed`, saying so) and waits (bounded) for a reboot
   * command already started.
   */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    const id = this.pending;
    if (this.child === undefined && id !== undefined) {
      this.o.log.warn({ apply_id: id }, "the agent is stopping; the scheduled reboot is cancelled");
      this.failed(id, CANCELLED_REBOOT);
      this.pending = undefined;
    }
    const child = this.child;
    if (child && child.exitCode === null && child.signalCode === null)
      await settledWithin(once(child, "exit"), 5_000);
    // Stopped with the agent's other hooks (SIGTERM, SIGKILL after a grace).
    await settledWithin(this.postReboot, 10_000);
  }

  /** The apply is `rebooting` before the command runs: the command may stop the agent at once. */
  private reboot(): void {
    const id = this.pending;
    const [file, ...args] = this.o.command;
    if (file === undefined || id === undefined) return;
    this.pending = undefined;
    const row = this.o.store.find(id);
    if (row) this.o.store.transitionReboot(row, "rebooting", { command_started_at: this.o.store.isoNow() });
    this.o.log.warn({ command: this.o.command, apply_id: id }, "running the reboot command");
    const child = spawnChild(file, args, { env: childEnv(this.o.env, CHILD_ENV.reboot), stdio: "ignore" });
    this.child = child;
    child.once("error", (err) => {
      this.o.log.error({ err }, "the reboot command could not be started");
      this.failed(id, `the reboot command could not be started: ${err.message}`);
    });
    child.once("exit", (code, signal) => {
      if (code === 0) return;
      this.o.log.error({ code, signal }, "the reboot command failed");
      this.failed(id, `the reboot command failed (${code === null ? `signal ${signal}` : `exit ${code}`})`);
    });
  }

  /** The reboot did not happen: the apply is `completed`, its reboot report says why. */
  private failed(id: number, error: string): void {
    try {
      const row = this.o.store.find(id);
      if (!row || (row.state !== "reboot_scheduled" && row.state !== "rebooting")) return;
      this.o.store.transitionReboot(row, "completed", { error });
    } catch (err) {
      this.o.log.error({ err, apply_id: id }, "the failed reboot could not be recorded");
    }
  }
}
