import { dirname, join } from "node:path";
import { fs } from "../../util/node-builtins.js";
import { plural } from "../../util/text.js";
import type { AptCommands } from "./apt-commands.js";
import { aptListOption } from "./apt-output.js";
import { lastLines } from "./command.js";
import type { Recovery } from "./package-manager.js";

const { readdirSync } = fs;

/** dpkg's states (second letter of `db:Status-Abbrev`) of a package it left unfinished. */
const UNFINISHED_STATES: Record<string, string> = {
  H: "half-installed",
  U: "unpacked",
  F: "half-configured",
  W: "triggers-awaited",
  t: "triggers-pending",
};

/**
 * dpkg left packages unpacked, half-configured or with triggers pending, or its journal unprocessed (what
 * apt refuses with "dpkg was interrupted"): `dpkg --configure -a` finishes them, run with apt's own dpkg
 * options (its root, its log) and the apply's configuration-file policy. Null when dpkg was not interrupted.
 */
export async function finishInterruptedDpkg(apt: AptCommands): Promise<Recovery | null> {
  const p = await apt.aptPaths();
  const unfinished = [...(await apt.packageStates()).values()]
    .filter((x) => UNFINISHED_STATES[x.state] !== undefined)
    .map((x) => `${x.name}:${x.arch} ${UNFINISHED_STATES[x.state]}`);
  const journal = readdirOrEmpty(join(dirname(p.status), "updates")).filter((f) => /^\d+$/.test(f));
  if (unfinished.length === 0 && journal.length === 0) return null;
  const dump = (await apt.run("apt-config dump", "apt-config", ["dump"])).stdout;
  const dpkg = [...aptListOption(dump, "DPkg::Options"), "--force-confdef", "--force-confold"];
  const r = await apt.run("dpkg --configure -a", p.dpkg, [...dpkg, "--configure", "-a"], true);
  const found = unfinished.slice(0, 10);
  return {
    command: "dpkg --configure -a",
    action: "ran",
    detail: `dpkg had been interrupted (${plural(unfinished.length, "package")} unfinished, ${plural(journal.length, "journal entry", "journal entries")}); \`dpkg --configure -a\` finished them`,
    lines: [...found, ...lastLines(r.stdout, 20 - found.length)],
  };
}

function readdirOrEmpty(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
