import { basename } from "node:path";

/** A folder or file that failed a check: a link, not a folder or a regular file, another user's, writable by others. */
export class UnsafePathError extends Error {
  constructor(
    readonly path: string,
    readonly reason: string,
  ) {
    super(`${path} ${reason}: the agent does not use it`);
    this.name = "UnsafePathError";
  }

  /** The message with the folders left out (for a problem: the agent's log names the whole path). */
  withoutFolders(): string {
    return `${basename(this.path) || this.path} ${this.reason}: the agent does not use it (its log names the path)`;
  }
}
