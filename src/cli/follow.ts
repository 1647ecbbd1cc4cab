import type { ApplyStatus } from "../system/schemas.js";
import { plural } from "../util/text.js";
import { sleep } from "../util/timers.js";
import { type AgentClient, AgentUnreachable, CliFailure } from "./agent.js";
import { cell, print } from "./output.js";

/* Following an apply from the terminal: its progress as it goes, then what it did. */

/** States in which the apply's package work is over (a reboot may follow). */
const OVER = new Set(["completed", "failed", "interrupted", "reboot_scheduled", "rebooting", "back_online"]);
/** How often the apply's status is asked for. */
const POLL_MS = 500;
/** The exit code of a command stopped by SIGINT, as a shell reports it. */
export const INTERRUPTED_EXIT = 130;

export interface FollowOptions {
  /** Print each new status record as the API gives it, one per line. */
  json: boolean;
  /** One line rewritten in place instead of a line per change. */
  tty: boolean;
  /** Width of the terminal (the live line is cut to it). */
  columns?: number;
}

export const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const count = (c: { done: number; total: number } | null) => (c === null ? "-" : `${c.done}/${c.total}`);

/** Where the apply is: `apply 3 installing: downloaded 5/5, installed 1/5, labslow`. */
function progressOf(s: ApplyStatus): string {
  const p = s.progress;
  const parts = [`downloaded ${count(p.download)}`, `installed ${count(p.install)}`];
  if (p.current) parts.push(p.current);
  return `apply ${s.id} ${s.state}: ${parts.join(", ")}`;
}

/** The progress line with the time since the apply started (its duration once it is over). */
export function progressLine(s: ApplyStatus, now: number): string {
  return `${progressOf(s)} (${seconds(s.duration_ms ?? now - Date.parse(s.started_at))})`;
}

/** The services to restart in one line (`to restart: cron.service (2 processes), ...`); none when empty. */
export function restartLine(services: ApplyStatus["services_restart_required"]): string[] {
  if (!services || services.length === 0) return [];
  const each = services.map((r) => {
    const n = plural(r.pids.length, "process", "processes");
    if (r.unit === null) return `${n} of no service (pids ${r.pids.join(", ")})`;
    return r.pids.length > 0 ? `${r.unit} (${n})` : r.unit;
  });
  return [`to restart: ${each.join(", ")}`];
}

/** What an apply did, in a few lines; its services to restart by unit, then the processes of no unit. */
export function summaryLines(s: ApplyStatus): string[] {
  const lines = [
    `apply ${s.id} ${s.state} in ${seconds(s.duration_ms ?? 0)}: ${s.upgraded.length} upgraded, ${s.installed.length} installed, ${s.removed.length} removed, ${s.held_back.length} held back`,
  ];
  for (const u of s.upgraded) lines.push(`  ${u.name} ${u.from} -> ${u.to}`);
  for (const h of s.held_back) lines.push(`  ${h.name} held back (${h.reason})`);
  const reboot = s.reboot_at === null ? "" : `; reboot at ${s.reboot_at}`;
  lines.push(`reboot required: ${cell(s.reboot_required)}${reboot}`);
  return [...lines, ...restartLine(s.services_restart_required)];
}

/** Where the live line or the plain lines go: a terminal gets one line rewritten in place. */
export const terminal = () => ({ tty: process.stdout.isTTY === true, columns: process.stdout.columns });

/** Writes the live line over the previous one. */
export function writeLive(line: string, columns: number | undefined): void {
  const cut = columns !== undefined && columns > 1 ? line.slice(0, columns - 1) : line;
  process.stdout.write(`\r\x1b[2K${cut}`);
}

/**
 * Runs `work` with a signal that SIGINT aborts instead of ending the process: for commands that follow
 * something until it ends or Ctrl-C. The handler is removed once `work` settles.
 */
export async function untilInterrupted<T>(work: (stop: AbortSignal) => Promise<T>): Promise<T> {
  const stop = new AbortController();
  const onSigint = () => stop.abort();
  process.on("SIGINT", onSigint);
  try {
    return await work(stop.signal);
  } finally {
    process.removeListener("SIGINT", onSigint);
  }
}

/** Waits `ms`; false when `stop` (SIGINT) aborted meanwhile. */
export const pause = (ms: number, stop: AbortSignal): Promise<boolean> =>
  sleep(ms, stop).then(
    () => true,
    () => false,
  );

/**
 * Follows apply `id` until its package work is over: a live line on a terminal, a line per change
 * otherwise, or each new status record (`json`). `first` is a status already at hand. SIGINT stops the
 * following only: the apply goes on, and how to follow it again is said. Resolves with the exit code: 0
 * when the apply succeeded, 130 when interrupted; a failed apply is a CliFailure.
 */
export async function follow(
  client: AgentClient,
  id: number,
  o: FollowOptions,
  first?: string,
): Promise<number> {
  let text = first;
  let printed = "";
  let live = false;
  return untilInterrupted(async (stop) => {
    for (;;) {
      text ??= await statusText(client, id);
      const s = JSON.parse(text) as ApplyStatus;
      const key = o.json ? text : progressOf(s);
      if (o.json && key !== printed) print(text);
      else if (o.tty) writeLive(progressLine(s, Date.now()), o.columns);
      else if (key !== printed) print(progressLine(s, Date.now()));
      printed = key;
      live = o.tty && !o.json;
      if (OVER.has(s.state)) {
        if (live) process.stdout.write("\n");
        return finished(s, o.json);
      }
      text = undefined;
      if (!(await pause(POLL_MS, stop))) {
        if (live) process.stdout.write("\n");
        process.stderr.write(
          `hostkeeper: stopped following; apply ${id} goes on: follow it again with hostkeeper updates follow ${id}\n`,
        );
        return INTERRUPTED_EXIT;
      }
    }
  });
}

/** The apply's status; an agent out of reach (restarting, say) is said with how to follow the apply again. */
async function statusText(client: AgentClient, id: number): Promise<string> {
  try {
    return (await client.call("GET", `/v1/system/applies/${id}`)).text;
  } catch (err) {
    if (!(err instanceof AgentUnreachable)) throw err;
    throw new CliFailure(`${err.message}; the apply may go on: hostkeeper updates follow ${id}`);
  }
}

/** The end: what the apply did (not with `json`: its record is printed), and the exit code. */
function finished(s: ApplyStatus, json: boolean): number {
  if (!json) print(summaryLines(s).join("\n"));
  if (s.state === "failed" || s.state === "interrupted")
    throw new CliFailure(
      `apply ${s.id} ${s.state}${s.error ? `: ${s.error.code}: ${s.error.detail}` : ""}`.replace(/\s+/g, " "),
    );
  return 0;
}
