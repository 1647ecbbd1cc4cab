import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

type After = { after: (fn: () => unknown) => void };

/**
 * An apt configuration whose root is an empty folder of its own: apt run with it has no sources, no
 * packages and nothing to change, and dpkg would be pointed at that folder too. What a test agent gets when
 * the test names no sandbox, so that no test reaches this machine's own packages by leaving the setting out
 * (apt reads the host's configuration when APT_CONFIG is unset).
 */
export function guardAptConfig(t: After): string {
  const root = mkdtempSync(join(tmpdir(), "hk-noapt-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const file = join(root, "apt.conf");
  writeFileSync(
    file,
    [
      `Dir "${root}/";`,
      `Dir::State::status "${root}/status";`,
      `DPkg::Options { "--root=${root}"; "--log=${root}/dpkg.log"; };`,
      "",
    ].join("\n"),
  );
  writeFileSync(join(root, "status"), "");
  return file;
}
