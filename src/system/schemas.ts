import { type Static, Type } from "@sinclair/typebox";
import { StringEnum } from "../http/schemas.js";

const PackageManagerName = StringEnum(["apt", "dnf", "none"], {
  description: "The package manager the agent uses on this host (`none`: none was found).",
});

const Pkg = {
  name: Type.String({ description: "Package name (apt: a foreign-architecture package without `:arch`)." }),
  arch: Type.String({ description: "Architecture, e.g. `amd64`, `all`, `x86_64`, `noarch`." }),
};

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
    held: Type.Boolean({ description: "Named in `HOSTKEEPER_HOLD_PACKAGES`: apply never upgrades it." }),
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
        reason: StringEnum(["hold", "kept_back"], {
          description:
            "`hold`: named in `HOSTKEEPER_HOLD_PACKAGES`; `kept_back`: the package manager did not upgrade it (e.g. its dependencies could not be met).",
        }),
      },
      { additionalProperties: false },
    ),
    { description: "Updates in scope of this apply that were not installed." },
  ),
};

export const ApplyResultSchema = Type.Object(
  {
    id: Type.Integer({ description: "Id of this apply in the apply history." }),
    update_type: StringEnum(["security", "full"]),
    package_manager: PackageManagerName,
    ...Changes,
    reboot_required: Type.Boolean({ description: "Whether the host needs a reboot after this apply." }),
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
