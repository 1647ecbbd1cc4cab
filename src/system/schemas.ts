import { type Static, Type } from "@sinclair/typebox";
import { StringEnum } from "../http/schemas.js";

const PackageManagerName = StringEnum(["apt", "dnf", "none"], {
  description: "The package manager the agent uses on this host (`none`: none was found).",
});

const Pkg = {
  name: Type.String({ description: "Package name (apt: a foreign-architecture package without `:arch`)." }),
  arch: Type.String({ description: "Architecture, e.g. `amd64`, `all`, `x86_64`, `noarch`." }),
};

const Severity = StringEnum(["critical", "important", "moderate", "low", "unknown"]);

const HeldReason = StringEnum(["hold", "phased", "kept_back"], {
  description:
    "`hold`: held by `HOSTKEEPER_HOLD_PACKAGES`, `apt-mark hold` or dnf versionlock; `phased`: an Ubuntu phased update apt does not offer this machine yet (apt's own phasing decision, reported, not overridden); `kept_back`: the package manager keeps it back (apt: it needs a package removed, which a `security` apply never does, or its dependencies cannot be met).",
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
    advisories: Type.Array(Type.Ref("Advisory"), {
      description:
        "What the update fixes. dnf: the updateinfo advisories of its newer versions. apt: one per changelog entry between the installed and the new version, read from the new version's package as downloaded from the configured repositories; empty when it could not be read in time.",
    }),
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
    updates: Type.Array(Type.Ref("PackageUpdate"), {
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

export const ApplyUpdatesRequestSchema = Type.Object(
  {
    update_type: StringEnum(["security", "full"], {
      description:
        "`security`: only updates from security origins (apt: security suites, each package at its security version; dnf: `upgrade-minimal --security`), never removing a package. `full`: everything (apt: `dist-upgrade`; dnf: `upgrade`).",
    }),
    auto_reboot: Type.Optional(
      Type.Boolean({
        description:
          "Default `false`. When true and a reboot is required after the apply, the reboot command runs after the response has been sent, after `HOSTKEEPER_REBOOT_DELAY_MS`.",
      }),
    ),
  },
  { additionalProperties: false, $id: "ApplyUpdatesRequest", title: "ApplyUpdatesRequest" },
);

const Installed = Type.Object({ ...Pkg, version: Type.String() }, { additionalProperties: false });

const Changes = {
  upgraded: Type.Array(
    Type.Object({ ...Pkg, from: Type.String(), to: Type.String() }, { additionalProperties: false }),
    { description: "Packages whose installed version changed." },
  ),
  installed: Type.Array(Installed, { description: "New packages the upgrade pulled in as dependencies." }),
  removed: Type.Array(Installed, { description: "Packages the upgrade removed (only `full` may)." }),
  held_back: Type.Array(
    Type.Object(
      {
        ...Pkg,
        current_version: Type.String(),
        available_version: Type.String({ description: "The version this apply would have installed." }),
        reason: HeldReason,
      },
      { additionalProperties: false },
    ),
    { description: "Updates in scope of this apply that were not installed." },
  ),
};

const ServicesRestart = Type.Union([Type.Array(Type.String()), Type.Null()], {
  description:
    "systemd services still running code this apply replaced, to be restarted (apt: `needrestart -b -r l`, which lists and never restarts; dnf: `dnf needs-restarting -s`). Null when the host cannot tell (apt: needrestart is not installed) or the apply did not finish.",
});

export const ApplyResultSchema = Type.Object(
  {
    id: Type.Integer({ description: "Id of this apply in the apply history." }),
    update_type: StringEnum(["security", "full"]),
    package_manager: PackageManagerName,
    ...Changes,
    reboot_required: Type.Boolean({ description: "Whether the host needs a reboot after this apply." }),
    services_restart_required: ServicesRestart,
    reboot_scheduled: Type.Boolean({
      description: "Whether the reboot command will run (`auto_reboot` and `reboot_required`).",
    }),
    reboot_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()], {
      description: "About when the reboot command runs; null when none is scheduled.",
    }),
    started_at: Type.String({ format: "date-time" }),
    finished_at: Type.String({ format: "date-time" }),
    duration_ms: Type.Integer(),
  },
  { additionalProperties: false, $id: "ApplyResult", title: "ApplyResult" },
);

export const RequesterSchema = Type.Object(
  {
    remote_address: Type.String({ description: "Address the request came from." }),
    user_agent: Type.Union([Type.String(), Type.Null()]),
  },
  { additionalProperties: false },
);

export const ApplyRecordSchema = Type.Object(
  {
    id: Type.Integer(),
    request_id: Type.String({
      description:
        "The request's `x-request-id` header when it had a usable one (1-128 characters of `A-Z a-z 0-9 . _ : / + = @ -`), else the id the agent generated for the request.",
    }),
    requested_by: RequesterSchema,
    update_type: StringEnum(["security", "full"]),
    auto_reboot: Type.Boolean(),
    package_manager: PackageManagerName,
    started_at: Type.String({ format: "date-time" }),
    finished_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()]),
    duration_ms: Type.Union([Type.Integer(), Type.Null()]),
    outcome: StringEnum(["running", "succeeded", "failed", "interrupted"], {
      description: "`interrupted`: the agent stopped during the apply.",
    }),
    error: Type.Union(
      [
        Type.Object({ code: Type.String(), detail: Type.String() }, { additionalProperties: false }),
        Type.Null(),
      ],
      { description: "The problem the apply answered with, when it failed." },
    ),
    ...Changes,
    reboot_required: Type.Union([Type.Boolean(), Type.Null()]),
    services_restart_required: ServicesRestart,
    reboot_scheduled: Type.Boolean(),
  },
  { additionalProperties: false, $id: "ApplyRecord", title: "ApplyRecord" },
);

export const ApplyHistorySchema = Type.Object(
  { applies: Type.Array(Type.Ref("ApplyRecord"), { description: "Newest first." }) },
  { additionalProperties: false, $id: "ApplyHistory", title: "ApplyHistory" },
);

export const ApplyHistoryQuerySchema = Type.Object(
  {
    limit: Type.Optional(
      Type.String({
        pattern: "^(?:[1-9][0-9]{0,2}|1000)$",
        description: "How many applies to list, 1-1000; default 50.",
      }),
    ),
  },
  { additionalProperties: false },
);

export const systemSharedSchemas = [
  AdvisorySchema,
  PackageUpdateSchema,
  SystemStatusSchema,
  ApplyUpdatesRequestSchema,
  ApplyResultSchema,
  ApplyRecordSchema,
  ApplyHistorySchema,
];

export type SystemStatus = Static<typeof SystemStatusSchema>;
export type ApplyUpdatesRequest = { update_type: "security" | "full"; auto_reboot?: boolean };
export type ApplyResult = Static<typeof ApplyResultSchema>;
export type ApplyRecord = Static<typeof ApplyRecordSchema>;
export type Requester = Static<typeof RequesterSchema> & { request_id: string };
