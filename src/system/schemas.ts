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
    callback_url: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 2048,
        description:
          "Optional. Receives a signed `system_update` event (the apply's status) at each state change, in order, through the durable outbox; absolute http(s), no credentials.",
      }),
    ),
  },
  { additionalProperties: false, $id: "ApplyUpdatesRequest", title: "ApplyUpdatesRequest" },
);

export const DownloadUpdatesRequestSchema = Type.Object(
  {
    update_type: StringEnum(["security", "full"], {
      description: "Download what an apply of this type would install (the same selection, holds included).",
    }),
  },
  { additionalProperties: false, $id: "DownloadUpdatesRequest", title: "DownloadUpdatesRequest" },
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

export const APPLY_STATES = [
  "queued",
  "downloading",
  "installing",
  "completed",
  "failed",
  "interrupted",
  "reboot_scheduled",
  "rebooting",
  "back_online",
] as const;
export type ApplyState = (typeof APPLY_STATES)[number];

const Count = Type.Union(
  [
    Type.Object(
      { done: Type.Integer({ minimum: 0 }), total: Type.Integer({ minimum: 0 }) },
      { additionalProperties: false },
    ),
    Type.Null(),
  ],
  { description: "Packages done of total; null before the package manager said." },
);

export const RebootReportSchema = Type.Object(
  {
    boot_id_before: Type.Union([Type.String(), Type.Null()], {
      description: "The boot the reboot was scheduled in (null when the boot id cannot be read).",
    }),
    kernel_before: Type.Union([Type.String(), Type.Null()], {
      description: "The running kernel then (`uname -r`).",
    }),
    command_started_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()]),
    boot_id_after: Type.Union([Type.String(), Type.Null()], {
      description: "The boot the agent came back in.",
    }),
    kernel_after: Type.Union([Type.String(), Type.Null()], {
      description: "The running kernel after the reboot.",
    }),
    back_online_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()], {
      description: "When the agent started in the new boot.",
    }),
    reboot_required_after: Type.Union([Type.Boolean(), Type.Null()], {
      description: "Whether a reboot is still required after it (null: the package manager could not say).",
    }),
    error: Type.Union([Type.String(), Type.Null()], {
      description:
        "Why the reboot did not happen (the command failed, or the agent stopped before it was due).",
    }),
  },
  { additionalProperties: false, $id: "RebootReport", title: "RebootReport" },
);
export type RebootReport = Static<typeof RebootReportSchema>;

export const RecoverySchema = Type.Object(
  {
    command: Type.String(),
    action: StringEnum(["ran", "reported"], {
      description:
        "`ran`: the package manager's repair ran (apt: `dpkg --configure -a`); `reported`: found and reported (dnf).",
    }),
    detail: Type.String(),
    lines: Type.Array(Type.String(), {
      description: "The package manager's own lines about it (at most 20).",
    }),
  },
  { additionalProperties: false, $id: "Recovery", title: "Recovery" },
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

export const ApplyStatusSchema = Type.Object(
  {
    id: Type.Integer({ description: "Id of the apply (also in the apply history)." }),
    state: StringEnum(APPLY_STATES, {
      description:
        "`queued` (waiting for the package manager), `downloading` (refreshing the lists, fetching packages), `installing`, then `completed` or `failed`; `interrupted`: the agent stopped during the apply. When a reboot follows: `reboot_scheduled`, `rebooting` (the reboot command ran), `back_online` (the agent started in a new boot).",
    }),
    update_type: StringEnum(["security", "full"]),
    auto_reboot: Type.Boolean(),
    package_manager: PackageManagerName,
    callback_url: Type.Union([Type.String(), Type.Null()]),
    progress: Type.Object(
      { download: Count, install: Count },
      {
        additionalProperties: false,
        description:
          "Packages downloaded and installed so far, from the package manager's own output (apt: `APT::Status-Fd`; dnf: its download and transaction lines). `download` `{0, 0}`: nothing had to be downloaded.",
      },
    ),
    planned: Type.Array(
      Type.Object(
        { ...Pkg, current_version: Type.String(), new_version: Type.String(), held: Type.Boolean() },
        { additionalProperties: false },
      ),
      {
        description:
          "The updates in scope, once the lists are refreshed; `new_version` is what this apply installs.",
      },
    ),
    ...Changes,
    reboot_required: Type.Union([Type.Boolean(), Type.Null()], {
      description: "Whether the host needs a reboot after the apply; null until it is over.",
    }),
    services_restart_required: ServicesRestart,
    reboot_scheduled: Type.Boolean(),
    reboot_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()]),
    reboot: Type.Union([Type.Ref("RebootReport"), Type.Null()], {
      description: "Null unless a reboot was scheduled.",
    }),
    recovery: Type.Union([Type.Ref("Recovery"), Type.Null()], {
      description:
        "What the package manager's recovery did before this apply (after an interrupted run); null when none was needed.",
    }),
    error: Type.Union(
      [
        Type.Object({ code: Type.String(), detail: Type.String() }, { additionalProperties: false }),
        Type.Null(),
      ],
      { description: "Why the apply failed: the problem code and detail a synchronous apply answers with." },
    ),
    history: Type.Array(
      Type.Object(
        { state: StringEnum(APPLY_STATES), at: Type.String({ format: "date-time" }) },
        { additionalProperties: false },
      ),
      { description: "Every state the apply went through, oldest first." },
    ),
    started_at: Type.String({ format: "date-time", description: "When the apply was requested." }),
    updated_at: Type.String({ format: "date-time" }),
    finished_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()], {
      description: "When the package work ended (a reboot may follow).",
    }),
    duration_ms: Type.Union([Type.Integer(), Type.Null()]),
    links: Type.Object({ status: Type.String() }, { additionalProperties: false }),
  },
  { additionalProperties: false, $id: "ApplyStatus", title: "ApplyStatus" },
);

export const ApplyIdParamsSchema = Type.Object(
  { apply_id: Type.String({ pattern: "^[1-9][0-9]{0,15}$", description: "The apply's id." }) },
  { additionalProperties: false },
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
    state: StringEnum(APPLY_STATES, {
      description: "The apply's state, as `GET /v1/system/applies/{id}` shows it.",
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
  DownloadUpdatesRequestSchema,
  DownloadResultSchema,
  RebootReportSchema,
  RecoverySchema,
  ApplyStatusSchema,
  ApplyResultSchema,
  ApplyRecordSchema,
  ApplyHistorySchema,
];

export type SystemStatus = Static<typeof SystemStatusSchema>;
export type ApplyUpdatesRequest = {
  update_type: "security" | "full";
  auto_reboot?: boolean;
  callback_url?: string;
};
export type DownloadResult = Static<typeof DownloadResultSchema>;
export type ApplyStatus = Omit<Static<typeof ApplyStatusSchema>, "reboot" | "recovery"> & {
  reboot: RebootReport | null;
  recovery: Static<typeof RecoverySchema> | null;
};
export type ApplyResult = Static<typeof ApplyResultSchema>;
export type ApplyRecord = Static<typeof ApplyRecordSchema>;
export type Requester = Static<typeof RequesterSchema> & { request_id: string };
