import { join, sep } from "node:path";
import { fs, type Stats } from "../../util/node-builtins.js";

const { lstatSync, readdirSync, realpathSync } = fs;
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

/** `path`'s own status (a link's, not its target's); undefined when it is gone meanwhile. */
function statOrUndefined(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch {
    return undefined;
  }
}

/**
 * Whether the agent, running as root, may use `path` to run what it holds: its real path (links resolved)
 * and that file's status, or why not. Every folder from `/` to it, and it, must be root's and writable by
 * no one else, as a link's target too: whoever can write a folder on the way can put another file in its
 * place. A folder writable by all with the sticky bit (`/tmp`) passes when it is root's: there, only an
 * entry's owner may rename or remove it, and the next entry must be root's.
 */
function rootOnly(path: string): { real: string; stat: Stats } | { reason: string } {
  let real: string;
  try {
    real = realpathSync(path);
  } catch (err) {
    return { reason: `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})` };
  }
  const parts = real.split(sep).filter((p) => p !== "");
  let st: Stats | undefined;
  for (let i = 0; i <= parts.length; i++) {
    const at = `${sep}${parts.slice(0, i).join(sep)}`;
    st = statOrUndefined(at);
    if (st === undefined) return { reason: `cannot be read (${at} is gone)` };
    const what = at === real ? "it" : `the folder ${at} on its path`;
    if (st.uid !== 0) return { reason: `is not safe: ${what} belongs to uid ${st.uid}, not root` };
    const sticky = st.isDirectory() && (st.mode & STICKY) !== 0;
    if ((st.mode & 0o022) !== 0 && !(sticky && at !== real))
      return {
        reason: `is not safe: ${what} is writable by ${(st.mode & 0o002) !== 0 ? "all users" : "its group"}`,
      };
  }
  // The last status read is the real path's own.
  return st === undefined ? { reason: "cannot be read" } : { real, stat: st };
}

/**
 * The hooks of `stage` in the hooks folder `dir`: its entries in name order (byte order, as `run-parts`
 * in the C locale), each checked by `rootOnly`. A missing folder holds none; an unsafe one refuses all.
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
  const unsafe = rootOnly(folder);
  if ("reason" in unsafe && names.length > 0) {
    out.refused.push({ name: `${stage}/`, reason: `${folder} ${unsafe.reason}` });
    return out;
  }
  const sorted = names
    .filter((n) => !NOT_A_HOOK.test(n))
    .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  for (const name of sorted) {
    const path = join(folder, name);
    const checked = rootOnly(path);
    if ("reason" in checked) out.refused.push({ name, reason: `${path} ${checked.reason}` });
    else if (checked.stat.isDirectory()) continue;
    else if (!checked.stat.isFile()) out.refused.push({ name, reason: `${path} is not a regular file` });
    else if ((checked.stat.mode & 0o100) === 0)
      out.skipped.push({ name, reason: `${path} is not executable` });
    else out.run.push({ name, path: checked.real });
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
