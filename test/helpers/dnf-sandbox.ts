import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { exec, nameVersionMap } from "./processes.js";

type After = { after: (fn: () => unknown) => void };

export interface RpmSpec {
  name: string;
  /** Version; the release is always 1. */
  version: string;
  requires?: string;
  provides?: string;
}

export interface Advisory {
  id: string;
  type: "security" | "bugfix" | "enhancement";
  packages: { name: string; version: string }[];
  /** Default: `Important` for security advisories, none otherwise. */
  severity?: string;
  cves?: string[];
  /** Default `2024-01-01 00:00:00`. */
  issued?: string;
}

const mkdir = (p: string) => mkdirSync(p, { recursive: true, mode: 0o755 });

/** Small noarch rpms (rpmbuild), a repository (createrepo_c) and its updateinfo (modifyrepo_c). */
export async function buildRpmRepo(
  t: After,
  rpms: readonly RpmSpec[],
  advisories: readonly Advisory[],
): Promise<string> {
  const work = mkdtempSync(join(tmpdir(), "hk-rpmbuild-"));
  const repo = mkdtempSync(join(tmpdir(), "hk-rpmrepo-"));
  t.after(() => rmSync(repo, { recursive: true, force: true }));
  try {
    mkdir(join(work, "SPECS"));
    mkdir(join(work, "tmp"));
    for (const r of rpms) {
      const spec = join(work, "SPECS", `${r.name}-${r.version}.spec`);
      writeFileSync(
        spec,
        [
          `Name: ${r.name}`,
          `Version: ${r.version}`,
          "Release: 1",
          `Summary: test package ${r.name}`,
          "License: MIT",
          "BuildArch: noarch",
          ...(r.requires ? [`Requires: ${r.requires}`] : []),
          ...(r.provides ? [`Provides: ${r.provides}`] : []),
          "%description",
          `test package ${r.name}`,
          "%install",
          `mkdir -p %{buildroot}/usr/share/${r.name}`,
          `echo ${r.version} > %{buildroot}/usr/share/${r.name}/version`,
          "%files",
          `/usr/share/${r.name}/version`,
          "",
        ].join("\n"),
      );
      // --nodeps and a private _dbpath: the build-dependency check would otherwise open the host's rpmdb.
      await exec("rpmbuild", [
        "--quiet",
        "--nodeps",
        "--define",
        `_topdir ${work}`,
        "--define",
        `_tmppath ${join(work, "tmp")}`,
        "--define",
        `_dbpath ${join(work, "rpmdb")}`,
        "-bb",
        spec,
      ]);
    }
    for (const f of readdirSync(join(work, "RPMS/noarch")))
      copyFileSync(join(work, "RPMS/noarch", f), join(repo, f));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  await exec("createrepo_c", ["-q", repo]);
  const updates = advisories.map((a) =>
    [
      `  <update from="tests@example.invalid" status="stable" type="${a.type}" version="1">`,
      `    <id>${a.id}</id>`,
      `    <title>${a.id}</title>`,
      ...((a.severity ?? (a.type === "security" ? "Important" : undefined))
        ? [`    <severity>${a.severity ?? "Important"}</severity>`]
        : []),
      `    <issued date="${a.issued ?? "2024-01-01 00:00:00"}"/>`,
      ...(a.cves?.length
        ? [
            "    <references>",
            ...a.cves.map(
              (c) =>
                `      <reference href="https://example.invalid/${c}" id="${c}" type="cve" title="${c}"/>`,
            ),
            "    </references>",
          ]
        : []),
      `    <description>${a.type} update</description>`,
      '    <pkglist><collection short="test"><name>test</name>',
      ...a.packages.map(
        (p) =>
          `      <package name="${p.name}" version="${p.version}" release="1" epoch="0" arch="noarch"><filename>${p.name}-${p.version}-1.noarch.rpm</filename></package>`,
      ),
      "    </collection></pkglist>",
      "  </update>",
    ].join("\n"),
  );
  const updateinfo = join(repo, "updateinfo.xml");
  writeFileSync(
    updateinfo,
    `<?xml version="1.0" encoding="UTF-8"?>\n<updates>\n${updates.join("\n")}\n</updates>\n`,
  );
  await exec("modifyrepo_c", ["--mdtype=updateinfo", updateinfo, join(repo, "repodata")]);
  rmSync(updateinfo);
  return repo;
}

export interface DnfRoot {
  root: string;
  /** dnf inside the root, reading only the root's configuration and repositories. */
  dnf(args: readonly string[]): Promise<string>;
  /** name -> installed version-release. */
  installed(): Promise<Record<string, string>>;
  /** Writes the versionlock plugin's list of the root (`name-epoch:version-release.*` lines). */
  lock(entries: readonly string[]): void;
}

/**
 * An install root with its own dnf.conf (cache, logs and state inside the root) and one repository. The
 * helper passes --installroot, --config, reposdir and --disableplugin=* on every call.
 */
export async function createDnfRoot(t: After, repo: string, install: readonly string[]): Promise<DnfRoot> {
  const root = mkdtempSync(join(tmpdir(), "hk-dnfroot-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  for (const d of ["etc/dnf/plugins", "etc/yum.repos.d", "var/cache/dnf", "var/lib/dnf", "var/log"])
    mkdir(join(root, d));
  // Plugin configuration inside the root, so the versionlock plugin reads the root's list, not the host's.
  writeFileSync(
    join(root, "etc/dnf/dnf.conf"),
    `[main]\ngpgcheck=0\ninstallonly_limit=3\nbest=True\nskip_if_unavailable=False\ncachedir=/var/cache/dnf\nlogdir=/var/log\npluginconfpath=${root}/etc/dnf/plugins\n`,
  );
  const locklist = join(root, "etc/dnf/plugins/versionlock.list");
  writeFileSync(locklist, "");
  writeFileSync(join(root, "etc/dnf/plugins/versionlock.conf"), `[main]\nenabled=1\nlocklist=${locklist}\n`);
  writeFileSync(
    join(root, "etc/yum.repos.d/test.repo"),
    `[test]\nname=test\nbaseurl=file://${repo}\ngpgcheck=0\nenabled=1\nmetadata_expire=0\n`,
  );
  const base = [
    `--installroot=${root}`,
    `--config=${root}/etc/dnf/dnf.conf`,
    `--setopt=reposdir=${root}/etc/yum.repos.d`,
    "--disableplugin=*",
    "-q",
  ];
  const env = { ...process.env, LC_ALL: "C" };
  const sandbox: DnfRoot = {
    root,
    dnf: (args) => exec("dnf", [...base, ...args], { env }),
    installed: async () => {
      const out = await sandbox.dnf(["--disablerepo=*", "repoquery", "--installed", "--qf=%{name} %{evr}"]);
      return nameVersionMap(out);
    },
    lock: (entries) => writeFileSync(locklist, entries.map((e) => `${e}\n`).join("")),
  };
  if (install.length > 0) await sandbox.dnf(["-y", "install", ...install]);
  return sandbox;
}

/** The agent's settings for a dnf install root: dnf there, no Caddy of its own needed, no restart scan. */
export const dnfAgentEnv = (root: DnfRoot): Record<string, string> => ({
  HOSTKEEPER_CADDY_ADMIN: "http://127.0.0.1:1",
  HOSTKEEPER_PACKAGE_MANAGER: "dnf",
  HOSTKEEPER_DNF_INSTALLROOT: root.root,
  HOSTKEEPER_SERVICES_RESTART_COMMAND: "none",
});
