import { mkdir, open, rename } from "node:fs/promises";
import { dirname } from "node:path";

/** Renames `tmp` over `dest` and fsyncs the folder, so the new file is in place after a crash too. */
export async function moveIntoPlace(tmp: string, dest: string): Promise<void> {
  await rename(tmp, dest);
  const dir = await open(dirname(dest), "r");
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}

/** Replaces `path` with `text` (mode 0644); a reader sees the old or the new content, never a mix. */
export async function writeAtomically(path: string, text: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o755 });
  const tmp = `${path}.tmp`;
  const fh = await open(tmp, "w", 0o644);
  try {
    await fh.writeFile(text);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await moveIntoPlace(tmp, path);
}
