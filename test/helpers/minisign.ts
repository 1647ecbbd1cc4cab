import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";

export interface MinisignKey {
  /** The secret key file. */
  sec: string;
  /** The base64 line of the public key file: what HOSTKEEPER_*_KEYS take. */
  line: string;
  /** The whole public key file. */
  pub: string;
}

/** A minisign key pair made by the real minisign tool (no password), as `<dir>/<name>.pub` and `.key`. */
export function minisignKeypair(dir: string, name: string): MinisignKey {
  const pub = join(dir, `${name}.pub`);
  const sec = join(dir, `${name}.key`);
  execFileSync("minisign", ["-G", "-W", "-p", pub, "-s", sec], { stdio: "pipe" });
  const text = readFileSync(pub, "utf8");
  return { sec, pub: text, line: text.split("\n")[1] as string };
}
