import { join } from "node:path";
import type { Logger } from "pino";
import { CHILD_ENV, childEnv } from "../../util/child-env.js";
import { fs } from "../../util/node-builtins.js";
import type { ApplyChanges, PackageUpdate } from "../packages/package-manager.js";
import { type HookStage, stageHooks } from "./hook-files.js";
import { type HookExit, runHook } from "./hook-process.js";

const { mkdirSync, rmSync, writeFileSync } = fs;

/** How one hook of an apply ended; `refused`: the agent did not run it (see hook-files.ts). */
export type HookOutcome = "succeeded" | "failed" | "timed_out" | "refused";

/** One hook's run, as the apply's record keeps it. */
export interface HookRecord extends HookExit {
  stage: HookStage;
  name: string;
  started_at: string;
  outcome: HookOutcome;
}

/** One line of the packages file: a package an apply changes (`from` empty: new; `to` empty: removed). */
export interface PackageLine {
  name: string;
  arch: string;
  from: string;
  to: string;
}

/** The packages file's lines of the updates an apply is about to install. */
export const linesOfUpdates = (updates: readonly PackageUpdate[]): PackageLine[] =>
  updates.map((u) => ({ name: u.name, arch: u.arch, from: u.current_version, to: u.new_version }));

/** The packages file's lines of what an apply changed. */
export const linesOfChanges = (c: Omit<ApplyChanges, "held_back">): PackageLine[] => [
  ...c.upgraded,
  ...c.installed.map((p) => ({ name: p.name, arch: p.arch, from: "", to: p.version })),
  ...c.removed.map((p) => ({ name: p.name, arch: p.arch, from: p.version, to: "" })),
];

/** What a stage's hooks are told of the apply, as `HOSTKEEPER_*` variables and the packages file. */
export interface HookContext {
  applyId: number;
  updateType: "security" | "full";
  trigger: "api" | "schedule";
  packages: PackageLine[];
  /** How the apply ended (post-apply, post-reboot). */
  outcome?: "succeeded" | "failed";
}

export interface HooksOptions {
  /** HOSTKEEPER_HOOKS_DIR: the folder of the stages' folders. */
  dir: string;
  timeoutMs: number;
  /** The agent's own folder for the packages files (in its data dir). */
  workDir: string;
  env: NodeJS.ProcessEnv;
  log: Logger;
}

/** What a failed hook's record says of it in one line: how it ended and the end of its output. */
export function hookFailure(r: HookRecord): string {
  const how =
    r.outcome === "refused"
      ? `was refused: ${r.error}`
      : r.error !== null
        ? `could not be started: ${r.error}`
        : r.timed_out
          ? "ran past its time-out (HOSTKEEPER_HOOK_TIMEOUT_S) and was stopped"
          : r.signal !== null
            ? `was killed by ${r.signal}`
            : `exited with status ${r.exit_code}`;
  const said = r.output.trim().slice(-500);
  return `${r.stage} hook ${r.name} ${how}${said === "" ? "" : `; its output ends: ${said}`}`;
}

const lines = (packages: PackageLine[]) =>
  packages.map((p) => `${p.name}\t${p.arch}\t${p.from}\t${p.to}\n`).join("");

/**
 * The host's hooks (HOSTKEEPER_HOOKS_DIR): the executables of a stage's folder, run one after the other in
 * name order, each with the allow-listed environment, the apply's context and a time-out; their output kept.
 */
export class Hooks {
  private readonly running = new Set<() => void>();
  private closed = false;

  constructor(private readonly o: HooksOptions) {}

  /**
   * Runs the hooks of `stage` for an apply; a pre-apply stage stops at the first that does not succeed. An
   * empty list when the stage has none. Never rejects: how each ended is in its record.
   */
  async run(stage: HookStage, ctx: HookContext): Promise<HookRecord[]> {
    const found = stageHooks(this.o.dir, stage);
    const records: HookRecord[] = found.refused.map((r) => refusedRecord(stage, r.name, r.reason));
    for (const r of records) this.logEnd(ctx, r);
    if (this.closed || found.run.length === 0 || (stage === "pre-apply" && records.length > 0))
      return records;
    const file = join(this.o.workDir, `apply-${ctx.applyId}-${stage}.tsv`);
    mkdirSync(this.o.workDir, { recursive: true, mode: 0o700 });
    rmSync(file, { force: true });
    writeFileSync(file, lines(ctx.packages), { mode: 0o600, flag: "wx" });
    try {
      for (const hook of found.run) {
        if (this.closed) break;
        const record = await this.one(stage, hook.name, hook.path, ctx, file);
        records.push(record);
        this.logEnd(ctx, record);
        if (stage === "pre-apply" && record.outcome !== "succeeded") break;
      }
    } finally {
      rmSync(file, { force: true });
    }
    return records;
  }

  /** Stops the hooks that run (SIGTERM to their groups, SIGKILL after a grace) and runs no more. */
  close(): void {
    this.closed = true;
    for (const stop of this.running) stop();
  }

  private async one(
    stage: HookStage,
    name: string,
    path: string,
    ctx: HookContext,
    file: string,
  ): Promise<HookRecord> {
    const started_at = new Date().toISOString();
    const env = childEnv(this.o.env, CHILD_ENV.hooks, {
      HOSTKEEPER_HOOK_STAGE: stage,
      HOSTKEEPER_HOOK_NAME: name,
      HOSTKEEPER_APPLY_ID: String(ctx.applyId),
      HOSTKEEPER_UPDATE_TYPE: ctx.updateType,
      HOSTKEEPER_TRIGGER: ctx.trigger,
      HOSTKEEPER_PACKAGES_FILE: file,
      ...(ctx.outcome === undefined ? {} : { HOSTKEEPER_APPLY_OUTCOME: ctx.outcome }),
    });
    let current: (() => void) | undefined;
    const exit = await runHook(path, env, this.o.timeoutMs, (stop) => {
      if (current) this.running.delete(current);
      current = stop;
      if (stop) this.running.add(stop);
    });
    const outcome: HookOutcome = exit.timed_out
      ? "timed_out"
      : exit.exit_code === 0 && exit.error === null
        ? "succeeded"
        : "failed";
    return { stage, name, started_at, outcome, ...exit };
  }

  private logEnd(ctx: HookContext, r: HookRecord): void {
    const fields = {
      apply_id: ctx.applyId,
      stage: r.stage,
      hook: r.name,
      outcome: r.outcome,
      exit_code: r.exit_code,
      duration_ms: r.duration_ms,
    };
    if (r.outcome === "succeeded") this.o.log.info(fields, `${r.stage} hook ${r.name} succeeded`);
    else this.o.log.warn(fields, hookFailure(r));
  }
}

function refusedRecord(stage: HookStage, name: string, reason: string): HookRecord {
  return {
    stage,
    name,
    started_at: new Date().toISOString(),
    outcome: "refused",
    exit_code: null,
    signal: null,
    timed_out: false,
    error: reason,
    duration_ms: 0,
    output: "",
    output_truncated: false,
  };
}
