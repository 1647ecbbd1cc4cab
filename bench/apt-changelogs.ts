/**
 * What reading changelogs for `advisories` adds to an apt check: a sandboxed apt (as the tests use) with
 * BENCH_PACKAGES small updates, each with a three-entry changelog, and one update whose package carries
 * BENCH_BIG_MB of incompressible data before its changelog. Times check() without changelogs, the first
 * check with them (download and read), and a second one (parsed changelogs cached).
 * Run: `npm run build && scripts/node dist/bench/apt-changelogs.js`.
 */
import { randomBytes } from "node:crypto";
import { AptPackageManager } from "../src/system/packages/apt.js";
import {
  buildAptRepo,
  changelogEntry,
  createAptSandbox,
  type DebSpec,
  debianArch,
} from "../test/helpers/apt-sandbox.js";

const N = Number(process.env.BENCH_PACKAGES ?? 200);
const BIG_MB = Number(process.env.BENCH_BIG_MB ?? 50);
const cleanups: (() => unknown)[] = [];
const t = { after: (fn: () => unknown) => cleanups.push(fn) };

const date = "Mon, 01 Jan 2024 00:00:00 +0000";
const log = (name: string, v: string) =>
  changelogEntry(
    name,
    v,
    "bookworm-security",
    "high",
    [`Fix CVE-2024-${1000 + v.length} (DSA-5000-1).`],
    date,
  ) + changelogEntry(name, "1.0", "bookworm", "medium", ["Initial release."], date);
const names = Array.from({ length: N }, (_, i) => `benchpkg${i}`);
const debs: DebSpec[] = [
  ...names.map(
    (name): DebSpec => ({ name, version: "1.0", suites: ["bookworm"], changelog: log(name, "1.0") }),
  ),
  ...names.map(
    (name): DebSpec => ({ name, version: "1.1", suites: ["bookworm-security"], changelog: log(name, "1.1") }),
  ),
  { name: "benchbig", version: "1.0", suites: ["bookworm"] },
  {
    name: "benchbig",
    version: "1.1",
    suites: ["bookworm-security"],
    changelog: log("benchbig", "1.1"),
    files: { "usr/lib/benchbig/blob": randomBytes(BIG_MB * 1024 * 1024) },
  },
];

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = process.hrtime.bigint();
  const r = await fn();
  return [Number(process.hrtime.bigint() - t0) / 1e6, r];
}

try {
  const repo = await buildAptRepo(t, debs, debianArch());
  const sandbox = await createAptSandbox(t, repo, { install: [...names, "benchbig"].map((n) => `${n}=1.0`) });
  const manager = (changelogTimeoutMs: number) =>
    new AptPackageManager({
      env: process.env,
      aptConfig: sandbox.aptConfig,
      hold: [],
      rebootRequiredFile: sandbox.rebootRequiredFile,
      needrestart: undefined,
      changelogTimeoutMs,
      lockTimeoutMs: 10_000,
      commandTimeoutMs: 600_000,
    });
  const [without] = await timed(() => manager(0).check());
  const m = manager(600_000);
  const [first, updates] = await timed(() => m.check());
  const [second] = await timed(() => m.check());
  const withAdvisories = updates.filter((u) => u.advisories.length > 0).length;
  console.log(
    JSON.stringify({
      packages: N + 1,
      big_mb: BIG_MB,
      without_ms: without,
      first_ms: first,
      cached_ms: second,
      withAdvisories,
    }),
  );
} finally {
  for (const fn of cleanups.reverse()) await fn();
}
