import { CHILD_ENV, type ChildEnv, childEnv } from "../../util/child-env.js";
import { commandFailed, lastLines, runCommand } from "../packages/command.js";
import { type ServiceToRestart, scanProcesses } from "./restart-scan.js";

export interface RestartFinderOptions {
  /** HOSTKEEPER_SERVICES_RESTART_COMMAND: undefined scans the process table, [] asks nothing, else a command. */
  command: readonly string[] | undefined;
  /** The process table the scan reads (`/proc`). */
  procRoot: string;
  env: NodeJS.ProcessEnv;
  timeoutMs: number;
}

/**
 * A restart command's output as the services to restart: `NEEDRESTART-SVC: unit` lines (`needrestart -b`), a
 * unit per line (`dnf needs-restarting -s`), `PID : command` lines (plain `dnf needs-restarting`: processes
 * of no known unit). These tools do not say which processes of a unit or which files, so a unit's `pids`
 * and `files` stay empty, and so do the `files` of those processes.
 */
export function parseRestartOutput(stdout: string): ServiceToRestart[] {
  const units = new Set<string>();
  const pids = new Set<number>();
  for (const raw of stdout.split("\n")) {
    const line = raw.trim();
    const unit =
      /^NEEDRESTART-SVC:\s*(\S+)$/.exec(line)?.[1] ??
      /^([^\s/]+\.(?:service|socket|scope|timer|path|mount))$/.exec(line)?.[1];
    const pid = /^(\d+) : /.exec(line)?.[1];
    if (unit !== undefined) units.add(unit);
    else if (pid !== undefined) pids.add(Number(pid));
  }
  const out: ServiceToRestart[] = [...units].sort().map((unit) => ({ unit, pids: [], files: [] }));
  if (pids.size > 0) out.push({ unit: null, pids: [...pids].sort((a, b) => a - b), files: [] });
  return out;
}

/**
 * Finds the services still running replaced code, the way HOSTKEEPER_SERVICES_RESTART_COMMAND says: the
 * agent's own scan of the process table, or a command such as needrestart's list mode. Never restarts.
 */
export class RestartFinder {
  private readonly env: ChildEnv;

  constructor(private readonly o: RestartFinderOptions) {
    this.env = childEnv(o.env, CHILD_ENV.packages, { LC_ALL: "C" });
  }

  /** The services to restart; null when the setting is `none`. Throws when the scan or command fails. */
  async find(): Promise<ServiceToRestart[] | null> {
    if (this.o.command === undefined) return scanProcesses(this.o.procRoot);
    const [file, ...args] = this.o.command;
    if (file === undefined) return null;
    const r = await runCommand(file, args, { env: this.env, timeoutMs: this.o.timeoutMs });
    if (r.code !== 0) throw commandFailed(this.o.command.join(" "), r, lastLines(r.stderr, 5));
    return parseRestartOutput(r.stdout);
  }
}
