import { setTimeout as sleep } from "node:timers/promises";
import {
  FINAL_PHASES,
  type Handoff,
  type Progress,
  readHandoff,
  readProgress,
  readReady,
  writeProgress,
} from "./handoff.js";
import { type HostPackages, tail } from "./host.js";

/**
 * The updater: run by `systemd-run` in a unit of its own (host.ts), it installs the new package, waits for
 * the new agent to say it is ready with the new version, and otherwise installs the kept package again and
 * waits for that agent. It writes each phase before the step it names, so that an updater started again on
 * the same folder (the agent does that when it finds the updater gone before its last word) carries on from
 * there: an install is repeated only when the package manager does not already have that version installed.
 */
const LOCK_WAIT_MS = 300_000;
const POLL_MS = 500;

type Installer = Pick<HostPackages, "install" | "installedVersion" | "resetFailed">;

export async function runUpdater(dir: string, host: Installer): Promise<Progress["phase"]> {
  const h = readHandoff(dir);
  if (h === undefined) throw new Error(`${dir} holds no handoff.json`);
  const p = readProgress(dir);
  if (p && FINAL_PHASES.has(p.phase)) return p.phase;
  let failure: Pick<Progress, "code" | "reason">;
  if (p?.phase === "rolling_back") failure = { code: p.code, reason: p.reason };
  else {
    const forward = await installAndWait(dir, h, host, "forward");
    if (forward === undefined) {
      writeProgress(dir, { phase: "completed" });
      return "completed";
    }
    failure = forward;
  }
  writeProgress(dir, { phase: "rolling_back", ...failure });
  await host.resetFailed();
  const back = await installAndWait(dir, h, host, "back");
  if (back === undefined) {
    writeProgress(dir, { phase: "rolled_back", ...failure });
    return "rolled_back";
  }
  writeProgress(dir, {
    phase: "failed",
    code: failure.code,
    reason: `${failure.reason}; going back to ${h.from_version} failed too: ${back.reason}`,
  });
  return "failed";
}

/**
 * Installs the new package (`forward`) or the kept one (`back`) unless that version is installed already,
 * then waits for an agent of that version to say it is ready, for `timeout_s`. Undefined when it did.
 */
async function installAndWait(
  dir: string,
  h: Handoff,
  host: Installer,
  way: "forward" | "back",
): Promise<Pick<Progress, "code" | "reason"> | undefined> {
  const [file, version] = way === "forward" ? [h.package, h.to_version] : [h.rollback, h.from_version];
  if (way === "forward") writeProgress(dir, { phase: "installing" });
  const since = Date.now();
  const ran = await installWaitingForLock(host, h, file, version);
  if (ran.code !== 0)
    return {
      code: "install_failed",
      reason: `installing ${version} failed (exit ${ran.code ?? "by signal"}): ${tail(ran.output)}`,
    };
  if (way === "forward") writeProgress(dir, { phase: "restarting" });
  // The time-out runs from the install's end; a ready said since its start counts.
  const deadline = Date.now() + h.timeout_s * 1000;
  while (Date.now() < deadline) {
    const ready = readReady(dir);
    // After an install, only an agent started since counts (the same version reinstalled has the old one
    // answering meanwhile); without one (the version was in place), a ready said since.
    const fresh = Date.parse(ran.installed ? (ready?.started_at ?? "") : (ready?.at ?? ""));
    if (ready?.version === version && fresh >= since) return undefined;
    await sleep(POLL_MS);
  }
  return {
    code: "not_ready",
    reason: `the agent did not answer ready as ${version} within ${h.timeout_s} s of the install`,
  };
}

/**
 * The install, unless `version` is installed already; tried again while another package manager holds the
 * lock (a killed updater's, finishing: then what it installed is looked at again first).
 */
async function installWaitingForLock(host: Installer, h: Handoff, file: string, version: string) {
  const until = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    if ((await host.installedVersion(h.format)) === version) return { code: 0, output: "", installed: false };
    const ran = await host.install(h.format, file);
    if (ran.code === 0 || !ran.locked || Date.now() > until) return { ...ran, installed: true };
    await sleep(2000);
  }
}
