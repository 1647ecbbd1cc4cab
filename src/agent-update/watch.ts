import { mkdir, readdir, rename, rm } from "node:fs/promises";
import { basename, join } from "node:path";
import type { Logger } from "pino";
import {
  FINAL_PHASES,
  keptDir,
  type Progress,
  readHandoff,
  readProgress,
  updateDir,
  writeReady,
} from "./handoff.js";
import type { HostPackages } from "./host.js";
import type { AgentUpdateRow, AgentUpdateStore } from "./store.js";

/** How many times an updater that stopped without its last word is started again on the same update. */
const MAX_LAUNCHES = 3;
export const unitName = (id: string, launch: number) => `hostkeeper-agent-update-${id}-${launch}`;
const launchOf = (unit: string | null) => Number(/-(\d+)$/.exec(unit ?? "")?.[1] ?? 0);

export interface WatchContext {
  store: AgentUpdateStore;
  host: Pick<HostPackages, "runningVersion" | "running" | "launch">;
  dataDir: string;
  /** Whether this agent answers ready now (listening, database and Caddy answering). */
  ready: () => Promise<boolean>;
  log: Logger;
}

/**
 * One look at an update handed to its updater (`installing`, `restarting`), from whichever agent runs now:
 * the one that asked for it, the new one, or the previous one again after a rollback. It says it is ready
 * when it is the version the updater waits for, records what the updater reports (`restarting`, then its
 * last word: the final state, recorded by the agent that runs then), and starts the updater again should
 * it be gone without one (killed, or the host went down).
 */
export async function reconcile(ctx: WatchContext, row: AgentUpdateRow): Promise<void> {
  const dir = updateDir(ctx.dataDir, row.id);
  const p = readProgress(dir);
  if (p && FINAL_PHASES.has(p.phase)) return finish(ctx, row, p);
  if (p?.phase === "restarting" && row.state === "installing") ctx.store.transition(row.id, "restarting");
  const own = ctx.host.runningVersion;
  const awaited =
    (own === row.to_version && (p?.phase === "installing" || p?.phase === "restarting")) ||
    (own === row.from_version && p?.phase === "rolling_back");
  if (awaited && (await ctx.ready())) writeReady(dir, own);
  if (row.updater_unit !== null && (await ctx.host.running(row.updater_unit))) return;
  // Its last word may have come as it ended.
  const last = readProgress(dir);
  if (last && FINAL_PHASES.has(last.phase)) return finish(ctx, row, last);
  await relaunch(ctx, row, dir, last);
}

/** Starts the updater again on the same folder; it carries on from the phase it wrote last. */
async function relaunch(ctx: WatchContext, row: AgentUpdateRow, dir: string, p: Progress | undefined) {
  const launch = launchOf(row.updater_unit) + 1;
  if (launch > MAX_LAUNCHES || readHandoff(dir) === undefined) {
    ctx.store.transition(row.id, "failed", {
      error_code: "updater_failed",
      error_message: `the updater stopped ${launch - 1} times without finishing (last phase: ${p?.phase ?? "none"}); see journalctl -u '${row.updater_unit}'`,
    });
    return cleanUp(ctx, row, undefined);
  }
  const unit = unitName(row.id, launch);
  ctx.log.warn(
    { agent_update: row.id, unit: row.updater_unit, phase: p?.phase ?? null },
    `agent update ${row.id}: the updater is gone before its last word; starting it again as ${unit}`,
  );
  ctx.store.set(row.id, { updater_unit: unit });
  await ctx.host.launch(unit, dir);
}

/** Records the updater's last word and keeps the package now installed for the next update's rollback. */
async function finish(ctx: WatchContext, row: AgentUpdateRow, p: Progress): Promise<void> {
  const h = readHandoff(updateDir(ctx.dataDir, row.id));
  if (p.phase === "completed") {
    if (row.state === "installing") ctx.store.transition(row.id, "restarting");
    ctx.store.transition(row.id, "completed");
    return cleanUp(ctx, row, h?.package);
  }
  const error = { error_code: p.code ?? ("updater_failed" as const), error_message: p.reason ?? p.phase };
  ctx.store.transition(row.id, p.phase === "rolled_back" ? "rolled_back" : "failed", error);
  return cleanUp(ctx, row, p.phase === "rolled_back" ? h?.rollback : undefined);
}

/** The update's folder goes; `installed`, the package now installed, is kept (the one before it goes). */
async function cleanUp(ctx: WatchContext, row: AgentUpdateRow, installed: string | undefined) {
  try {
    if (installed !== undefined) {
      const kept = keptDir(ctx.dataDir);
      await mkdir(kept, { recursive: true, mode: 0o700 });
      const name = basename(installed).replace(/^rollback-/, "");
      for (const old of await readdir(kept)) if (old !== name) await rm(join(kept, old), { force: true });
      await rename(installed, join(kept, name));
    }
    await rm(updateDir(ctx.dataDir, row.id), { recursive: true, force: true });
  } catch (err) {
    ctx.log.warn({ err, agent_update: row.id }, "agent update: cleaning up its folder failed");
  }
}
