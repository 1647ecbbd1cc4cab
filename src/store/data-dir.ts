import { join } from "node:path";
import { fs } from "../util/node-builtins.js";

const { mkdirSync, rmSync, statSync, writeFileSync } = fs;

/** The data dir cannot serve the agent; the message names HOSTKEEPER_DATA_DIR and the path. */
export class DataDirError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DataDirError";
  }
}

const code = (err: unknown) => (err as NodeJS.ErrnoException).code ?? (err as Error).message;

/**
 * Makes sure the data dir can hold the agent's state before anything is written to it: created (mode 0700)
 * when missing, a directory, the agent's user's own, writable. Each failure is one sentence naming
 * HOSTKEEPER_DATA_DIR and the path, rather than the first raw EACCES of whichever part writes first.
 */
export function prepareDataDir(path: string): void {
  const where = `the data dir ${path} (HOSTKEEPER_DATA_DIR)`;
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(path);
  } catch (err) {
    // ENOTDIR: a file where a parent directory should be, which the creation below names.
    if (code(err) !== "ENOENT" && code(err) !== "ENOTDIR")
      throw new DataDirError(`${where} cannot be read: ${code(err)}`);
    try {
      mkdirSync(path, { recursive: true, mode: 0o700 });
      st = statSync(path);
    } catch (e) {
      throw new DataDirError(`${where} is missing and cannot be created: ${code(e)}`);
    }
  }
  if (!st.isDirectory()) throw new DataDirError(`${where} is not a directory`);
  const uid = process.getuid?.();
  // It holds the API token and the webhook secret: another user who owns it could read or replace them.
  if (uid !== undefined && st.uid !== uid)
    throw new DataDirError(
      `${where} belongs to uid ${st.uid}, not to the agent's user (uid ${uid}); it holds the API token, so it must be the agent's own`,
    );
  // A write, not access(2): root passes every permission check, but not a read-only file system.
  const probe = join(path, `.write-check-${process.pid}`);
  try {
    writeFileSync(probe, "");
    rmSync(probe);
  } catch (err) {
    throw new DataDirError(`${where} is not writable: ${code(err)}`);
  }
}
