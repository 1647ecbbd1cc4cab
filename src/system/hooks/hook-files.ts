import { join, sep } from "node:path";
import { fs, type Stats } from "../../util/node-builtins.js";

const { lstatSync, readdirSync, realpathSync, statSync } = fs;
/** The sticky bit of a folder's mode (S_ISVTX). */
const STICKY = 0o1000;

/** The moments an apply runs the host's hooks at, each a folder of the hooks folder. */
export const HOOK_STAGES = ["pre-apply", "post-apply", "post-reboot"] as const;
export type HookStage = (typeof HOOK_STAGES)[number];

/** A hook the agent runs: its name in the stage's folder, and the file it is (links resolved). */
export interface HookFile {
  name: string;
  path: string;
}

/** A stage's folder as the agent reads it: what runs, in name order, and what it will not run, and why. */
export interface StageHooks {
  stage: HookStage;
  run: HookFile[];
  /** Not safe to run as root: the agent refuses them (a pre-apply one refuses the apply). */
  refused: { name: string; reason: string }[];
  /** Regular files without an execute bit: left out, as `run-parts` does. */
  skipped: { name: string; reason: string }[];
}

/** Names left in a folder by editors and package managers, never hooks: `.x`, `x~`, `x.dpkg-old`, `x.rpmnew`. */
const NOT_A_HOOK = /^\.|~$|\.dpkg-[a-z]+$|\.rpm(new|save|orig)$/;

/** `path`'s own status (`follow`: its target's); undefined when it is gone meanwhile. */
function statOrUndefined(path: string, follow = false): Stats | undefined {
  try {
    return follow ? statSync(path) : lstatSync(path);
  } catch {
    return undefined;
  }
}

/** The path `path` resolves to, links followed; undefined when it is gone meanwhile. */
function realOrUndefined(path: string): string | undefined {
  try {
    return realpathSync(path);
  } catch {
    return undefined;
  }
}

/**
 * Why `path` may not be used by the agent, running as root, to run what it holds; undefined when it may.
 * Every folder from `/` to it, and it, must be root's and writable by no one else, as a link's target too:
 * whoever can write a folder on the way can put another file in its place. A folder writable by all with
 * the sticky bit (`/tmp`) passes when it is root's: there, only an entry's owner may rename or remove it,
 * and the next entry must be root's.
 */
export function notRootOnly(path: string): string | undefined {
  let real: string;
  try {
    real = realpathSync(path);
  } catch (err) {
    return `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`;
  }
  const parts = real.split(sep).filter((p) => p !== "");
  for (let i = 0; i <= parts.length; i++) {
    const at = `${sep}${parts.slice(0, i).join(sep)}`;
    const st = statOrUndefined(at);
    if (st === undefined) return `cannot be read (${at} is gone)`;
    const what = at === real ? "it" : `the folder ${at} on its path`;
    if (st.uid !== 0) return `is not safe: ${what} belongs to uid ${st.uid}, not root`;
    const sticky = st.isDirectory() && (st.mode & STICKY) !== 0;
    if ((st.mode & 0o022) !== 0 && !(sticky && at !== real))
      return `is not safe: ${what} is writable by ${(st.mode & 0o002) !== 0 ? "all users" : "its group"}`;
  }
  return undefined;
}

/**
 * The hooks of `stage` in the hooks folder `dir`: its entries in name order (byte order, as `run-parts`
 * in the C locale), each checked by `notRootOnly`. A missing folder holds none; an unsafe one refuses all.
 */
export function stageHooks(dir: string, stage: HookStage): StageHooks {
  const folder = join(dir, stage);
  const out: StageHooks = { stage, run: [], refused: [], skipped: [] };
  let names: string[];
  try {
    names = readdirSync(folder);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return out;
    out.refused.push({ name: `${stage}/`, reason: `${folder} cannot be read (${code ?? String(err)})` });
    return out;
  }
  const unsafe = notRootOnly(folder);
  if (unsafe !== undefined && names.length > 0) {
    out.refused.push({ name: `${stage}/`, reason: `${folder} ${unsafe}` });
    return out;
  }
  const sorted = names
    .filter((n) => !NOT_A_HOOK.test(n))
    .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  for (const name of sorted) {
    const path = join(folder, name);
    const reason = notRootOnly(path);
    if (reason !== undefined) {
      out.refused.push({ name, reason: `${path} ${reason}` });
      continue;
    }
    const st = statOrUndefined(path, true);
    const real = st?.isFile() ? realOrUndefined(path) : undefined;
    if (st?.isDirectory()) continue;
    if (st === undefined) out.refused.push({ name, reason: `${path} cannot be read` });
    else if (!st.isFile()) out.refused.push({ name, reason: `${path} is not a regular file` });
    else if ((st.mode & 0o100) === 0) out.skipped.push({ name, reason: `${path} is not executable` });
    else if (real === undefined) out.refused.push({ name, reason: `${path} cannot be read` });
    else out.run.push({ name, path: real });
  }
  return out;
}

/** Every stage's hooks, for `hostkeeper config check` and the agent's start. */
export function allStageHooks(dir: string): StageHooks[] {
  return HOOK_STAGES.map((stage) => stageHooks(dir, stage));
}

/** One line per hook the agent will not run, for the log at start and `config check`. */
export function hookWarnings(stages: readonly StageHooks[]): string[] {
  return stages.flatMap((s) => [
    ...s.refused.map(
      (r) =>
        `${r.name.endsWith("/") ? `the hooks folder ${r.name}` : `hook ${s.stage}/${r.name}`} is refused: ${r.reason}`,
    ),
    ...s.skipped.map((r) => `hook ${s.stage}/${r.name} is left out: ${r.reason}`),
  ]);
}

/** The hooks each stage runs, in one line: `pre-apply: 10-backup, 20-drain; post-apply: none; ...`. */
export function hooksLine(stages: readonly StageHooks[]): string {
  return stages
    .map((s) => `${s.stage}: ${s.run.length === 0 ? "none" : s.run.map((h) => h.name).join(", ")}`)
    .join("; ");
}
