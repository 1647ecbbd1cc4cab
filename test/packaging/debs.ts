import { appendFileSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { check } from "./container.js";

/**
 * The .deb at `newVersion`: unpacked, its version changed (control file and the agent's package.json), its
 * Caddy binary one byte longer (a new Caddy, as far as the upgrade can tell; it still runs), `tweak` given
 * the unpacked tree to change more (it answers the paths it changed), packed again.
 */
export async function debAtVersion(
  deb: string,
  newVersion: string,
  dir: string,
  tweak: (tree: string) => string[] = () => [],
): Promise<string> {
  const tree = join(dir, `next-${newVersion}`);
  await check("dpkg-deb", ["-R", deb, tree]);
  const control = join(tree, "DEBIAN/control");
  writeFileSync(control, readFileSync(control, "utf8").replace(/^Version: .*$/m, `Version: ${newVersion}`));
  const pkgJson = "usr/lib/hostkeeper/package.json";
  const pkg = JSON.parse(readFileSync(join(tree, pkgJson), "utf8")) as { version: string };
  writeFileSync(join(tree, pkgJson), `${JSON.stringify({ ...pkg, version: newVersion }, null, 2)}\n`);
  const caddy = "usr/lib/hostkeeper/caddy/caddy";
  appendFileSync(join(tree, caddy), "\n");
  const md5sums = join(tree, "DEBIAN/md5sums");
  let sums = readFileSync(md5sums, "utf8");
  const changed = [pkgJson, caddy, ...tweak(tree)];
  for (const line of (await check("md5sum", changed, { cwd: tree })).trim().split("\n")) {
    const file = line.slice(line.indexOf("  ") + 2);
    sums = sums
      .split("\n")
      .map((l) => (l.endsWith(`  ${file}`) ? line : l))
      .join("\n");
  }
  writeFileSync(md5sums, sums);
  const out = join(dir, `hostkeeper_${newVersion}_amd64.deb`);
  await check("dpkg-deb", ["--root-owner-group", "-Zgzip", "-z1", "-b", tree, out], { timeoutMs: 120_000 });
  rmSync(tree, { recursive: true, force: true });
  return out;
}
