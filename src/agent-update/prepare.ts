import { copyFile, mkdir, readdir } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Authentication } from "../operator/artifacts/authentication.js";
import { AgentUpdateFailure } from "./failure.js";
import type { PackageFetch, PackageRef } from "./fetch.js";
import { keptDir, updateDir, writeHandoff } from "./handoff.js";
import { compareVersions, type HostFacts, type HostPackages, packageFileName } from "./host.js";
import type { AgentUpdateStore } from "./store.js";

const PROGRESS_EVERY_MS = 250;

export interface PrepareContext {
  store: AgentUpdateStore;
  host: HostPackages;
  fetch: PackageFetch;
  dataDir: string;
  /** Where the running version's package is fetched when none is kept (HOSTKEEPER_AGENT_UPDATE_SOURCE). */
  defaultSource: string | undefined;
  timeoutS: number;
  log: Logger;
}

/**
 * An update up to its install: making sure of the way back (the running version's package: the one kept,
 * else fetched and verified as the new one is), `downloading` the package, `verifying` its signature,
 * checksum and fields (name, architecture, a version newer than the running one unless a downgrade is
 * allowed), and writing the handoff. Nothing on the host changes before this ends; the caller starts the updater.
 */
export async function prepare(
  ctx: PrepareContext,
  id: string,
  ref: PackageRef,
  facts: HostFacts,
  allowDowngrade: boolean,
): Promise<string> {
  const { store, host } = ctx;
  const dir = updateDir(ctx.dataDir, id);
  const pkg = join(dir, ref.file);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // The way back first: without it nothing else is fetched.
  const rollback = await wayBack(ctx, dir, facts, ref);
  let reported = 0;
  const proof = await ctx.fetch.fetch(
    ref,
    pkg,
    (done, total) => {
      if (Date.now() - reported < PROGRESS_EVERY_MS && done !== total) return;
      reported = Date.now();
      store.setProgress(id, done, total);
    },
    () => store.transition(id, "verifying"),
  );
  store.set(id, signatureFields(proof));
  const version = await checkFields(ctx, pkg, facts, ref.version || undefined);
  const running = host.runningVersion;
  if (compareVersions(version, running) <= 0 && !allowDowngrade)
    throw new AgentUpdateFailure(
      "downgrade_refused",
      `${version} is not newer than the running ${running}; a request with allow_downgrade: true installs it`,
    );
  store.set(id, { to_version: version });
  writeHandoff(dir, {
    id,
    format: facts.format,
    package: pkg,
    rollback,
    from_version: running,
    to_version: version,
    timeout_s: ctx.timeoutS,
  });
  return dir;
}

function signatureFields(proof: Authentication) {
  return {
    signature_key_id: proof.key.id,
    signature_file: proof.file,
    signature_comment: proof.sig.trustedComment,
  };
}

/** The package's version, once its name and architecture are this host's (and its version the asked one). */
async function checkFields(ctx: PrepareContext, file: string, facts: HostFacts, asked: string | undefined) {
  const f = await ctx.host.fields(facts.format, file);
  const bad = (why: string) => new AgentUpdateFailure("package_invalid", why);
  if (typeof f === "string") throw bad(`the downloaded file: ${f}`);
  if (f.name !== "hostkeeper") throw bad(`the package is ${f.name}, not hostkeeper`);
  if (f.arch !== facts.arch) throw bad(`the package is built for ${f.arch}; this host is ${facts.arch}`);
  if (asked !== undefined && f.version !== asked)
    throw bad(`the package is version ${f.version}, not ${asked}`);
  return f.version;
}

/**
 * The running version's package, for a rollback: the one kept since it was installed by an update, else
 * fetched from the request's source or HOSTKEEPER_AGENT_UPDATE_SOURCE and verified. Without one there is
 * no way back, and the update does not start.
 */
async function wayBack(ctx: PrepareContext, dir: string, facts: HostFacts, ref: PackageRef): Promise<string> {
  const running = ctx.host.runningVersion;
  const file = packageFileName(facts.format, running, facts.arch);
  const dest = join(dir, `rollback-${file}`);
  const kept = keptDir(ctx.dataDir);
  const keptFiles: string[] = await readdir(kept).catch(() => []);
  if (keptFiles.includes(file)) {
    await copyFile(join(kept, file), dest);
    return dest;
  }
  const source = ref.version !== "" ? ref.source : ctx.defaultSource;
  if (source === undefined)
    throw new AgentUpdateFailure(
      "rollback_unavailable",
      `no package of the running ${running} is kept, and no release source is known to fetch ${file} from (give a version with artifact_source, or set HOSTKEEPER_AGENT_UPDATE_SOURCE): the update would have no way back`,
    );
  try {
    await ctx.fetch.fetch({ source, version: running, file, checksum: null }, dest);
    await checkFields(ctx, dest, facts, running);
  } catch (err) {
    throw new AgentUpdateFailure(
      "rollback_unavailable",
      `the running version's package ${file}, needed for a rollback, could not be had from ${source}: ${(err as Error).message}`,
    );
  }
  return dest;
}
