import { HostPackages } from "./host.js";
import { runUpdater } from "./updater.js";

/* The updater's process (`systemd-run ... node updater-main.js <update folder>`); see updater.ts. */
const dir = process.argv[2];
if (!dir) {
  process.stderr.write("usage: updater-main.js <update folder>\n");
  process.exit(2);
}
runUpdater(dir, new HostPackages()).then(
  (phase) => {
    process.stdout.write(`hostkeeper agent update in ${dir}: ${phase}\n`);
    process.exit(phase === "failed" ? 1 : 0);
  },
  (err: unknown) => {
    process.stderr.write(
      `hostkeeper agent update in ${dir} stopped: ${(err as Error).stack ?? String(err)}\n`,
    );
    process.exit(1);
  },
);
