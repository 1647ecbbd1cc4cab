import { Type } from "@sinclair/typebox";
import { RefTo, StringEnum } from "../util/typebox.js";

/* The schemas of check-updates and download-updates: what updates there are, and what a download fetched. */

export const PackageManagerName = StringEnum(["apt", "dnf", "none"], {
  description: "The package manager the agent uses on this host (`none`: none was found).",
});

export const Pkg = {
  name: Type.String({ description: "Package name (apt: a foreign-architecture package without `:arch`)." }),
  arch: Type.String({ description: "Architecture, e.g. `amd64`, `all`, `x86_64`, `noarch`." }),
};

const Severity = StringEnum(["critical", "important", "moderate", "low", "unknown"]);

export const HeldReason = StringEnum(["hold", "phased", "kept_back", "excluded", "deferred"], {
  description:
    "`hold`: held by `HOSTKEEPER_HOLD_PACKAGES`, `apt-mark hold` or dnf versionlock; `excluded`: the apply's `exclude` named it; `deferred`: younger than the apply's minimum age, until `eligible_at` (these two in an apply's `held_back`, and `deferred` in a check asked with a minimum age); `phased`: an Ubuntu phased update apt does not offer this machine yet (apt's own phasing decision, reported, not overridden); `kept_back`: the package manager keeps it back (apt: it needs a package removed, which a `security` apply never does, or its dependencies cannot be met).",
});

export const AdvisorySchema = Type.Object(
  {
    id: Type.String({
      description:
        "dnf: the updateinfo advisory id. apt: the first DSA, DLA or USN id the changelog entry names, else `<source package>/<version>`.",
    }),
    type: StringEnum(["security", "bugfix", "enhancement", "newpackage", "unknown"], {
      description:
        "dnf: the advisory's type. apt: `security` when the entry names a CVE, DSA, DLA or USN id or was uploaded to a `-security` suite, else `bugfix`.",
    }),
    severity: {
      ...Severity,
      description:
        "dnf: the advisory's severity. apt: from the entry's `urgency=` for security entries (emergency and critical: `critical`, high: `important`, medium: `moderate`, low: `low`); `unknown` otherwise.",
    },
    cves: Type.Array(Type.String(), { description: "CVE ids the advisory names." }),
    issued: Type.Union([Type.String({ format: "date-time" }), Type.Null()], {
      description:
        "dnf: the advisory's date (its issued date, or when it was last updated). apt: the entry's date. Null when there is none.",
    }),
  },
  { additionalProperties: false, $id: "Advisory", title: "Advisory" },
);

export const ServiceToRestartSchema = Type.Object(
  {
    unit: Type.Union([Type.String(), Type.Null()], {
      description:
        "The systemd service of these processes: the innermost `.service` of their cgroup (a user's service, under `user@UID.service`, by its own name). Null for the processes of no service (a login session, a container's scope, a host without systemd). With a restart command, the unit it names.",
    }),
    pids: Type.Array(Type.Integer(), {
      description:
        "Its processes that map replaced or deleted files, ascending. Empty for a unit a restart command named (it does not say which).",
    }),
    files: Type.Array(Type.String(), {
      description:
        "The replaced or deleted files they map, by the path they had (inside the process's own root). Empty with a restart command.",
    }),
  },
  {
    additionalProperties: false,
    $id: "ServiceToRestart",
    title: "ServiceToRestart",
    description:
      "Processes that still map (`/proc/<pid>/maps`) an executable, a library or any other file that was replaced or deleted since, grouped by systemd service.",
  },
);

/** Services and processes running replaced code: `description` says when. */
export const servicesRestart = (description: string) =>
  Type.Union([Type.Array(RefTo(ServiceToRestartSchema)), Type.Null()], { description });

export const PackageUpdateSchema = Type.Object(
  {
    ...Pkg,
    current_version: Type.String({ description: "The installed version." }),
    new_version: Type.String({ description: "The newest available version (what a `full` apply installs)." }),
    security: Type.Boolean({
      description:
        "Whether a security update exists (apt: from a security origin; dnf: named by a security advisory).",
    }),
    security_version: Type.Union([Type.String(), Type.Null()], {
      description:
        "The version a `security` apply installs; it may be older than `new_version` when a newer regular version exists. Null when `security` is false.",
    }),
    held: Type.Boolean({
      description:
        "Held by `HOSTKEEPER_HOLD_PACKAGES`, `apt-mark hold` or dnf versionlock: apply never upgrades it.",
    }),
    held_reason: Type.Union([HeldReason, Type.Null()], {
      description:
        "Why an apply would not install this update; null when it would. `kept_back` on a security update may concern the `security` apply only.",
    }),
    advisories: Type.Array(RefTo(AdvisorySchema), {
      description:
        "What the update fixes. dnf: the updateinfo advisories of its newer versions. apt: one per changelog entry between the installed and the new version, read from the new version's package as downloaded from the configured repositories; empty when it could not be read in time.",
    }),
    first_seen_at: Type.String({
      format: "date-time",
      description:
        "When the agent's checks first offered `new_version` (kept across restarts; a version no longer offered is forgotten).",
    }),
    eligible_at: Type.Optional(
      Type.String({
        format: "date-time",
        description:
          "With a check asked for a minimum age (`min_age_days`, `security_min_age_days`): when `new_version` reaches it, for a version still younger; an apply with the same minimum defers it until then.",
      }),
    ),
  },
  { additionalProperties: false, $id: "PackageUpdate", title: "PackageUpdate" },
);

export const SystemStatusSchema = Type.Object(
  {
    packages: Type.Array(Type.String(), { description: "Names of the packages with available updates." }),
    security_updates: Type.Integer({ description: "Number of packages with a security update." }),
    regular_updates: Type.Integer({ description: "Number of packages with only regular updates." }),
    updates_available: Type.Boolean(),
    reboot_required: Type.Boolean({
      description:
        "Whether the host needs a reboot now (apt: the reboot-required flag file, or needrestart's kernel status; dnf: `dnf needs-restarting -r`).",
    }),
    services_restart_required: servicesRestart(
      "Services and processes running replaced or deleted files now, found as after an apply (see `ApplyResult`); services by name, then the processes of no service. Null when `HOSTKEEPER_SERVICES_RESTART_COMMAND` is `none` or the scan or command failed.",
    ),
    package_manager: PackageManagerName,
    checked_at: Type.String({ format: "date-time" }),
    severity_counts: Type.Object(
      {
        critical: Type.Integer(),
        important: Type.Integer(),
        moderate: Type.Integer(),
        low: Type.Integer(),
        unknown: Type.Integer(),
      },
      {
        additionalProperties: false,
        description:
          "Packages with an update, counted by the highest severity among their advisories (`unknown`: none has a known severity); the counts add up to the number of updates.",
      },
    ),
    updates: Type.Array(RefTo(PackageUpdateSchema), {
      description: "Each package with an update, in detail.",
    }),
  },
  {
    additionalProperties: false,
    $id: "System",
    title: "System",
    description: "The System object of the interface, plus the details of each update.",
  },
);

export const DownloadResultSchema = Type.Object(
  {
    update_type: StringEnum(["security", "full"]),
    package_manager: PackageManagerName,
    packages: Type.Array(
      Type.Object(
        { ...Pkg, current_version: Type.String(), new_version: Type.String() },
        { additionalProperties: false },
      ),
      {
        description:
          "The updates in scope: what the apply of this type would install (held packages left out).",
      },
    ),
    downloaded: Type.Array(
      Type.Object(
        { file: Type.String({ description: "File name in the cache." }), bytes: Type.Integer() },
        { additionalProperties: false },
      ),
      {
        description:
          "Package files this call put into the package manager's cache (apt: `Dir::Cache::archives`; dnf: its `cachedir`); files already there are not listed.",
      },
    ),
    bytes: Type.Integer({ description: "Sum of `downloaded[].bytes`." }),
    started_at: Type.String({ format: "date-time" }),
    finished_at: Type.String({ format: "date-time" }),
    duration_ms: Type.Integer(),
  },
  { additionalProperties: false, $id: "DownloadResult", title: "DownloadResult" },
);

/** What a check may be asked: the minimum ages an apply would use, so the check says which updates would wait. */
export const CheckQuerySchema = Type.Object(
  {
    min_age_days: Type.Optional(
      Type.Integer({ minimum: 0, maximum: 365, description: "As apply-updates' `min_age_days`." }),
    ),
    security_min_age_days: Type.Optional(
      Type.Integer({ minimum: 0, maximum: 365, description: "As apply-updates' `security_min_age_days`." }),
    ),
  },
  { additionalProperties: false },
);
