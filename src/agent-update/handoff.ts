import { join } from "node:path";
import { fs } from "../util/node-builtins.js";
import type { PackageFormat } from "./host.js";

const { closeSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } = fs;

/**
 * What the agent and its updater tell each other, as files in the update's folder under the data dir
 * (root's, 0700): the agent writes the plan (`handoff.json`) before it starts the updater and says it is
 * ready (`ready.json`, with its version) once it answers; the updater writes where it is (`progress.json`).
 * Files, not the database: the agent alone writes the database, and either side may be stopped at any
 * point and read the other's last word when it starts again.
 */
export interface Handoff {
  id: string;
  format: PackageFormat;
  /** The new package, and the running version's, installed again for a rollback. */
  package: string;
  rollback: string;
  from_version: string;
  to_version: string;
  timeout_s: number;
}

/** Where the updater is; `completed`, `rolled_back` and `failed` are its last word. */
export type Phase = "installing" | "restarting" | "rolling_back" | "completed" | "rolled_back" | "failed";
export const FINAL_PHASES: ReadonlySet<Phase> = new Set(["completed", "rolled_back", "failed"]);

export interface Progress {
  phase: Phase;
  /** Why it rolls back or failed: `install_failed` or `not_ready`, and the words. */
  code?: "install_failed" | "not_ready";
  reason?: string;
  at: string;
}

export interface Ready {
  version: string;
  pid: number;
  /** When the agent's process started: an agent started before an install is not the one it installed. */
  started_at: string;
  at: string;
}

export const updatesDir = (dataDir: string) => join(dataDir, "agent-update");
export const updateDir = (dataDir: string, id: string) => join(updatesDir(dataDir), id);
/** The installed version's package, kept for the next update's rollback. */
export const keptDir = (dataDir: string) => join(updatesDir(dataDir), "installed");

const FILES = { handoff: "handoff.json", progress: "progress.json", ready: "ready.json" } as const;

/** Replaces `path` with `value` as JSON (0600), fsynced: a reader sees the old or the new, whole. */
function writeJson(path: string, value: unknown): void {
  const tmp = `${path}.tmp`;
  const fd = openSync(tmp, "w", 0o600);
  try {
    writeSync(fd, `${JSON.stringify(value)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}

function readJson<T>(path: string): T | undefined {
  try {
    return JSON.parse(readFileSync(path, "utf8")) as T;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

export const writeHandoff = (dir: string, h: Handoff) => writeJson(join(dir, FILES.handoff), h);
export const readHandoff = (dir: string) => readJson<Handoff>(join(dir, FILES.handoff));
export const writeProgress = (dir: string, p: Omit<Progress, "at">) =>
  writeJson(join(dir, FILES.progress), { ...p, at: new Date().toISOString() });
export const readProgress = (dir: string) => readJson<Progress>(join(dir, FILES.progress));
export const writeReady = (dir: string, version: string) =>
  writeJson(join(dir, FILES.ready), {
    version,
    pid: process.pid,
    started_at: new Date(Date.now() - process.uptime() * 1000).toISOString(),
    at: new Date().toISOString(),
  });
export const readReady = (dir: string) => readJson<Ready>(join(dir, FILES.ready));
