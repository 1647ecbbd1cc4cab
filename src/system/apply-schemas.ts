import { Type } from "@sinclair/typebox";
import { RefTo, StringEnum } from "../util/typebox.js";
import { HeldReason, PackageManagerName, Pkg, servicesRestart } from "./check-schemas.js";
import { EXCLUDE_PATTERN, MAX_EXCLUDES } from "./packages/exclude.js";

/* The schemas of apply-updates and of an apply's status: its states, what it changed, its reboot. */

/** What an apply leaves out besides the holds; a download ahead of it takes the same. */
const Selection = {
  min_age_days: Type.Optional(
    Type.Integer({
      minimum: 0,
      maximum: 365,
      description:
        "Default 0. A regular update's version must have been offered this many days (since the agent's checks first saw it, `first_seen_at`) to be installed; a younger one waits, in `held_back` with reason `deferred` and `eligible_at`. What needs it waits with it.",
    }),
  ),
  security_min_age_days: Type.Optional(
    Type.Integer({
      minimum: 0,
      maximum: 365,
      description: "Default 0. The same for a security update's version.",
    }),
  ),
  exclude: Type.Optional(
    Type.Array(Type.String({ pattern: EXCLUDE_PATTERN }), {
      maxItems: MAX_EXCLUDES,
      description:
        "Package name patterns (shell globs: `*`, `?`, `[...]`) kept out of the apply, on top of the holds: such an update is not installed and shows in the result's `held_back` with reason `excluded`.",
    }),
  ),
};

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
          "Optional. Receives a signed `system_update` event (the apply's status) at each state change, in order, through the durable outbox; absolute http(s), no credentials, or `hostkeeper:connection` for the connection to the control plane (docs/connect.md).",
      }),
    ),
    ...Selection,
  },
  { additionalProperties: false, $id: "ApplyUpdatesRequest", title: "ApplyUpdatesRequest" },
);

export const ApplyTriggerSchema = StringEnum(["api", "schedule"], {
  description:
    "What started the apply: `api`, a call of apply-updates; `schedule`, a slot of the maintenance schedule (`GET /v1/system/schedule`).",
});

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

export const HookRecordSchema = Type.Object(
  {
    stage: StringEnum(["pre-apply", "post-apply", "post-reboot"]),
    name: Type.String({ description: "The hook's file name in the stage's folder." }),
    started_at: Type.String({ format: "date-time" }),
    outcome: StringEnum(["succeeded", "failed", "timed_out", "refused"], {
      description:
        "`refused`: not run, as not safe to run as root (`error` says why: not root's, writable by others, on such a path).",
    }),
    exit_code: Type.Union([Type.Integer(), Type.Null()]),
    signal: Type.Union([Type.String(), Type.Null()], {
      description: "The signal that ended it, if one did.",
    }),
    timed_out: Type.Boolean({ description: "It ran past `HOSTKEEPER_HOOK_TIMEOUT_S` and was stopped." }),
    error: Type.Union([Type.String(), Type.Null()], {
      description: "Why it was refused, or could not be started.",
    }),
    duration_ms: Type.Integer({ minimum: 0 }),
    output: Type.String({ description: "The end of what it wrote (stdout and stderr), at most 16 KiB." }),
    output_truncated: Type.Boolean({ description: "Its output was longer: the start is left out." }),
  },
  { additionalProperties: false, $id: "HookRecord", title: "HookRecord" },
);

const Hooks = Type.Array(RefTo(HookRecordSchema), {
  description:
    "The host's hooks this apply ran (pre-apply, post-apply, then post-reboot after the report-back of its reboot), in order; empty when none ran (none configured, or nothing to install).",
});

export const Installed = Type.Object({ ...Pkg, version: Type.String() }, { additionalProperties: false });

export const Changes = {
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
        eligible_at: Type.Optional(
          Type.String({
            format: "date-time",
            description: "For `deferred`: when that version reaches the apply's minimum age.",
          }),
        ),
      },
      { additionalProperties: false },
    ),
    { description: "Updates in scope of this apply that were not installed." },
  ),
};

export const ServicesRestart = servicesRestart(
  "Services and processes still running code replaced or deleted by the end of the apply (by it or before), to be restarted: the agent's own scan of `/proc` after the apply (or `HOSTKEEPER_SERVICES_RESTART_COMMAND`), which lists and never restarts; services by name, then the processes of no service. Null when that setting is `none`, the scan or command failed, or the apply did not finish.",
);

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
    hooks: Hooks,
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
    trigger: ApplyTriggerSchema,
    update_type: StringEnum(["security", "full"]),
    auto_reboot: Type.Boolean(),
    package_manager: PackageManagerName,
    callback_url: Type.Union([Type.String(), Type.Null()]),
    progress: Type.Object(
      {
        download: Count,
        install: Count,
        current: Type.Union([Type.String(), Type.Null()], {
          description:
            "The package the package manager works on now, as it last named it (apt: the package of its `Get:` line or dpkg step; dnf: the file it last downloaded, the package of its transaction step). Null before it named one, and once the apply is over.",
        }),
      },
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
    reboot: Type.Union([RefTo(RebootReportSchema), Type.Null()], {
      description: "Null unless a reboot was scheduled.",
    }),
    hooks: Hooks,
    recovery: Type.Union([RefTo(RecoverySchema), Type.Null()], {
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

export const DownloadUpdatesRequestSchema = Type.Object(
  {
    update_type: StringEnum(["security", "full"], {
      description: "Download what an apply of this type would install (the same selection, holds included).",
    }),
    ...Selection,
  },
  {
    additionalProperties: false,
    $id: "DownloadUpdatesRequest",
    title: "DownloadUpdatesRequest",
    description:
      "`exclude`, `min_age_days` and `security_min_age_days` as for an apply: what an apply with them would not install is not downloaded (a maintenance schedule's download ahead takes its own).",
  },
);
