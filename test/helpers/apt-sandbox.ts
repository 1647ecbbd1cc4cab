import { createHash } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { exec, nameVersionMap } from "./processes.js";

type After = { after: (fn: () => unknown) => void };

export type Suite = "bookworm" | "bookworm-updates" | "bookworm-security" | "jammy-updates";

export interface DebSpec {
  name: string;
  version: string;
  suites: Suite[];
  depends?: string;
  /** Body of a postinst script; it runs without chroot (as in the sandbox) and must only use $DPKG_ROOT. */
  postinst?: string;
  /** More control fields (`Conflicts`, ...). */
  control?: Record<string, string>;
  /** Written as /usr/share/doc/<name>/changelog.Debian.gz (see `changelogEntry`). */
  changelog?: string;
  /** `Phased-Update-Percentage` of this version in the Packages index (as Ubuntu's archive adds it). */
  phased?: number;
  /** More files, by path in the package. */
  files?: Record<string, Buffer | string>;
}

/** A postinst that flags a reboot, as a kernel package does. */
export const REBOOT_FLAG_POSTINST =
  'echo "*** System restart required ***" > "$DPKG_ROOT/run/reboot-required"';

/**
 * A postinst that writes its pid to `<name>-postinst.pid` in the root and waits (at most 60 s) until the
 * test creates `release-<name>` there: an apply held in its install step for as long as a test needs.
 */
export const waitingPostinst = (name: string): string =>
  [
    `echo $$ > "$DPKG_ROOT/${name}-postinst.pid"`,
    "i=0",
    `while [ ! -e "$DPKG_ROOT/release-${name}" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`,
  ].join("\n");

/** One entry of a Debian changelog (deb-changelog(5)). */
export function changelogEntry(
  source: string,
  version: string,
  distribution: string,
  urgency: string,
  changes: readonly string[],
  date: string,
): string {
  return [
    `${source} (${version}) ${distribution}; urgency=${urgency}`,
    "",
    ...changes.map((c) => `  * ${c}`),
    "",
    ` -- Hostkeeper tests <tests@example.invalid>  ${date}`,
    "",
    "",
  ].join("\n");
}

/** The changelog entry of a test package's first version, 1.0 (a later version's changelog ends with it). */
export const initialEntry = (name: string): string =>
  changelogEntry(name, "1.0", "bookworm", "medium", ["Initial release."], "Mon, 01 Jan 2024 00:00:00 +0000");

/** Debian's shape: archive `debian` (bookworm, bookworm-updates) and archive `debian-security`. */
const ARCHIVE: Record<Suite, { archive: string; label: string }> = {
  bookworm: { archive: "debian", label: "Debian" },
  "bookworm-updates": { archive: "debian", label: "Debian" },
  "bookworm-security": { archive: "debian-security", label: "Debian-Security" },
  // Ubuntu's shape, for phased updates.
  "jammy-updates": { archive: "ubuntu", label: "Ubuntu" },
};

export interface AptRepo {
  dir: string;
  /** Debian architecture of this machine (what apt asks for besides `all`). */
  arch: string;
  sourcesList: string;
}

const mkdir = (p: string) => mkdirSync(p, { recursive: true, mode: 0o755 });

/** Builds the .debs with dpkg-deb and writes the Packages and Release indexes of each suite. */
export async function buildAptRepo(t: After, debs: readonly DebSpec[], arch: string): Promise<AptRepo> {
  const dir = mkdtempSync(join(tmpdir(), "hk-aptrepo-"));
  chmodSync(dir, 0o755);
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const bySuite = new Map<Suite, string[]>();
  const phased = new Map<string, number>();
  await Promise.all(
    debs.map(async (d) => {
      const src = join(dir, "build", `${d.name}_${d.version}`);
      mkdir(join(src, "DEBIAN"));
      mkdir(join(src, "usr/share/doc", d.name));
      writeFileSync(join(src, "usr/share/doc", d.name, "version"), `${d.version}\n`);
      writeFileSync(
        join(src, "DEBIAN/control"),
        [
          `Package: ${d.name}`,
          `Version: ${d.version}`,
          "Architecture: all",
          "Maintainer: Hostkeeper tests <tests@example.invalid>",
          ...(d.depends ? [`Depends: ${d.depends}`] : []),
          ...Object.entries(d.control ?? {}).map(([k, v]) => `${k}: ${v}`),
          `Description: test package ${d.name}`,
          "",
        ].join("\n"),
      );
      for (const [path, content] of Object.entries(d.files ?? {})) {
        mkdir(join(src, path, ".."));
        writeFileSync(join(src, path), content);
      }
      if (d.changelog)
        writeFileSync(join(src, "usr/share/doc", d.name, "changelog.Debian.gz"), gzipSync(d.changelog));
      if (d.postinst) {
        // Refuses to run outside a dpkg --root, so a mistake cannot write to the host.
        const guard = '[ -n "$DPKG_ROOT" ] || { echo "no DPKG_ROOT" >&2; exit 1; }';
        writeFileSync(join(src, "DEBIAN/postinst"), `#!/bin/sh\nset -e\n${guard}\n${d.postinst}\n`);
        chmodSync(join(src, "DEBIAN/postinst"), 0o755);
      }
      for (const suite of d.suites) {
        const rel = join("pool", suite, `${d.name}_${d.version}_all.deb`);
        const out = join(dir, ARCHIVE[suite].archive, rel);
        mkdir(join(out, ".."));
        await exec("dpkg-deb", ["--root-owner-group", "-Zgzip", "--build", src, out]);
        bySuite.set(suite, [...(bySuite.get(suite) ?? []), rel]);
        if (d.phased !== undefined) phased.set(rel, d.phased);
      }
    }),
  );
  for (const suite of Object.keys(ARCHIVE) as Suite[])
    await writeSuiteIndex(dir, suite, (bySuite.get(suite) ?? []).sort(), arch, phased);
  rmSync(join(dir, "build"), { recursive: true, force: true });
  const sourcesList = (Object.keys(ARCHIVE) as Suite[])
    .map((s) => `deb [trusted=yes] file:${join(dir, ARCHIVE[s].archive)} ${s} main`)
    .join("\n");
  return { dir, arch, sourcesList: `${sourcesList}\n` };
}

async function writeSuiteIndex(
  dir: string,
  suite: Suite,
  debs: string[],
  arch: string,
  phased: ReadonlyMap<string, number>,
): Promise<void> {
  const { archive, label } = ARCHIVE[suite];
  const root = join(dir, archive);
  const stanzas: string[] = [];
  for (const rel of debs) {
    const file = join(root, rel);
    const bytes = readFileSync(file);
    const control = (await exec("dpkg-deb", ["-f", file])).trimEnd();
    stanzas.push(
      [
        control,
        ...(phased.has(rel) ? [`Phased-Update-Percentage: ${phased.get(rel)}`] : []),
        `Filename: ${rel}`,
        `Size: ${statSync(file).size}`,
        `MD5sum: ${createHash("md5").update(bytes).digest("hex")}`,
        `SHA256: ${createHash("sha256").update(bytes).digest("hex")}`,
      ].join("\n"),
    );
  }
  const packages = stanzas.length ? `${stanzas.join("\n\n")}\n` : "";
  const indexes = [`main/binary-all/Packages`, `main/binary-${arch}/Packages`];
  const dist = join(root, "dists", suite);
  for (const idx of indexes) {
    mkdir(join(dist, idx, ".."));
    writeFileSync(join(dist, idx), packages);
  }
  const sha = createHash("sha256").update(packages).digest("hex");
  writeFileSync(
    join(dist, "Release"),
    [
      `Origin: ${label === "Debian-Security" ? "Debian" : label}`,
      `Label: ${label}`,
      `Suite: ${suite}`,
      `Codename: ${suite}`,
      "Version: 12",
      "Date: Mon, 01 Jan 2024 00:00:00 UTC",
      `Architectures: all ${arch}`,
      "Components: main",
      "SHA256:",
      ...indexes.map((i) => ` ${sha} ${Buffer.byteLength(packages)} ${i}`),
      "",
    ].join("\n"),
  );
}

export interface AptSandbox {
  root: string;
  /** The file for APT_CONFIG / HOSTKEEPER_APT_CONFIG. */
  aptConfig: string;
  rebootRequiredFile: string;
  /** apt-get inside the sandbox (APT_CONFIG set explicitly, after the config was checked). */
  aptGet(args: readonly string[]): Promise<string>;
  /** apt-mark inside the sandbox. */
  aptMark(args: readonly string[]): Promise<string>;
  /** name -> installed version, from the sandbox's dpkg database. */
  installed(): Promise<Record<string, string>>;
}

/**
 * A root `S` for apt and dpkg (see the shared apt notes): apt reads only `S`'s configuration and state, and
 * dpkg runs with `--root=S --log=S/var/log/dpkg.log`. The configuration is verified before apt runs.
 */
export async function createAptSandbox(
  t: After,
  repo: AptRepo,
  opts: { install?: readonly string[]; sourcesList?: string; machineId?: string } = {},
): Promise<AptSandbox> {
  const root = mkdtempSync(join(tmpdir(), "hk-aptroot-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  for (const d of [
    "etc/apt/apt.conf.d",
    "etc/apt/preferences.d",
    "etc/apt/sources.list.d",
    "var/lib/apt/lists/partial",
    "var/cache/apt/archives/partial",
    "var/lib/dpkg/info",
    "var/lib/dpkg/updates",
    "var/log/apt",
    "run",
  ])
    mkdir(join(root, d));
  chmodSync(root, 0o755);
  writeFileSync(join(root, "var/lib/dpkg/status"), "");
  // apt phases updates only with a machine id (Dir::Etc::machine-id, in the root here).
  if (opts.machineId) writeFileSync(join(root, "etc/machine-id"), `${opts.machineId}\n`);
  writeFileSync(join(root, "etc/apt/sources.list"), opts.sourcesList ?? repo.sourcesList);
  const dpkgOptions = [
    `--root=${root}`,
    `--log=${root}/var/log/dpkg.log`,
    // Maintainer scripts run outside a chroot (the root has no shell); the test packages honour $DPKG_ROOT.
    "--force-script-chrootless",
    ...(process.getuid?.() === 0 ? [] : ["--force-not-root"]),
  ];
  const aptConfig = join(root, "apt.conf");
  writeFileSync(
    aptConfig,
    [
      `Dir "${root}/";`,
      `Dir::State::status "${root}/var/lib/dpkg/status";`,
      `DPkg::Options { ${dpkgOptions.map((o) => `"${o}";`).join(" ")} };`,
      'DPkg::Use-Pty "false";',
      'Acquire::Languages "none";',
      "",
    ].join("\n"),
  );
  const env = { ...process.env, APT_CONFIG: aptConfig, DEBIAN_FRONTEND: "noninteractive", LC_ALL: "C" };
  const dump = await exec("apt-config", ["dump"], { env });
  for (const must of [
    `Dir::State::status "${root}/var/lib/dpkg/status";`,
    `DPkg::Options:: "--root=${root}";`,
    `DPkg::Options:: "--log=${root}/var/log/dpkg.log";`,
  ])
    if (!dump.includes(must))
      throw new Error(`the sandbox apt configuration lacks ${must}; refusing to run apt`);

  const sandbox: AptSandbox = {
    root,
    aptConfig,
    rebootRequiredFile: join(root, "run/reboot-required"),
    aptGet: (args) => exec("apt-get", args, { env }),
    aptMark: (args) => exec("apt-mark", args, { env }),
    installed: async () => {
      const out = await exec("dpkg-query", [
        `--admindir=${root}/var/lib/dpkg`,
        "-W",
        // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own field syntax
        "-f=${Package} ${Version}\\n",
      ]);
      return nameVersionMap(out);
    },
  };
  if (opts.install?.length) {
    await sandbox.aptGet(["-q", "update"]);
    await sandbox.aptGet(["-y", "-q", "install", ...opts.install]);
  }
  return sandbox;
}

/** This machine's Debian architecture, from Node's (the host's dpkg is not asked). */
export function debianArch(): string {
  const map: Record<string, string> = {
    x64: "amd64",
    arm64: "arm64",
    ia32: "i386",
    arm: "armhf",
    ppc64: "ppc64el",
  };
  return map[process.arch] ?? process.arch;
}

/** The agent's settings for an apt sandbox: apt there, no Caddy of its own needed, no restart scan. */
export const aptAgentEnv = (s: AptSandbox): Record<string, string> => ({
  HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
  HOSTKEEPER_PACKAGE_MANAGER: "apt",
  HOSTKEEPER_APT_CONFIG: s.aptConfig,
  HOSTKEEPER_REBOOT_REQUIRED_FILE: s.rebootRequiredFile,
  HOSTKEEPER_NEEDRESTART: "none",
});
