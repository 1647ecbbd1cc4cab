import { type Static, Type } from "@sinclair/typebox";
import { NullableString, StringEnum } from "../util/typebox.js";
import { updateErrorCodes } from "./failure.js";

const updateStates = [
  "queued",
  "downloading",
  "verifying",
  "starting",
  "health_checking",
  "switching",
  "draining",
  "completed",
  "failed",
  "rolled_back",
] as const;
export type UpdateState = (typeof updateStates)[number];

/** Letters, digits, `.`, `_`, `-`; no path separators; starts with a letter or digit. */
const UPDATE_ID_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$";
/** As an id, plus `+` (semver build metadata), since the version names a folder of the release layout. */
const VERSION_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$";
const CHECKSUM_PATTERN = "^(sha256:)?[0-9a-fA-F]{64}$";

export const OperatorUpdateRequestSchema = Type.Object(
  {
    callback_url: Type.String({
      maxLength: 2048,
      description:
        "Absolute http(s) URL that receives an `operator_update` event at each state change; `hostkeeper:connection`: over the connection to the control plane (docs/connect.md).",
    }),
    update_process_id: Type.String({
      pattern: UPDATE_ID_PATTERN,
      description:
        "Identifies the update process; 1-128 characters: letters, digits, `.`, `_`, `-`, starting with a letter or digit.",
      examples: ["upd-2024-06-01.1"],
    }),
    version: Type.String({
      pattern: VERSION_PATTERN,
      description:
        "Release to install, the folder `<source>/<version>/`; 1-128 characters: letters, digits, `.`, `_`, `+`, `-`, starting with a letter or digit.",
      examples: ["1.4.2"],
    }),
    artifact_source: Type.Optional(
      NullableString(
        Type.String({
          maxLength: 2048,
          description:
            "`https://` prefix, `s3://bucket/prefix`, or an https URL on the object-storage endpoint. Omitted or null: the community edition source.",
        }),
      ),
    ),
    checksum: Type.Optional(
      Type.String({
        pattern: CHECKSUM_PATTERN,
        description:
          "SHA-256 of the executable: `sha256:<64 hex>` or 64 hex digits. Omitted: `<source>/<version>/SHA256SUMS` must list it.",
      }),
    ),
  },
  { additionalProperties: false, $id: "OperatorUpdateRequest", title: "Operator" },
);
export type OperatorUpdateRequest = Static<typeof OperatorUpdateRequestSchema>;

const SlotSchema = Type.Union([Type.Literal("blue"), Type.Literal("green")]);
const instanceRef = (description: string) =>
  Type.Union(
    [Type.Object({ slot: SlotSchema, version: Type.String() }, { additionalProperties: false }), Type.Null()],
    { description },
  );

export const UpdateStatusSchema = Type.Object(
  {
    update_process_id: Type.String(),
    version: Type.String(),
    state: StringEnum(updateStates, { description: "`completed`, `failed` and `rolled_back` are final." }),
    artifact_source: Type.String({
      description: "The source used (the community source when none was given).",
    }),
    artifact_url: Type.Union([Type.String(), Type.Null()], {
      description: "The executable's URL, once resolved.",
    }),
    progress: Type.Object(
      {
        bytes_downloaded: Type.Integer(),
        bytes_total: Type.Union([Type.Integer(), Type.Null()], { description: "Null until known." }),
      },
      { additionalProperties: false },
    ),
    previous_instance: instanceRef(
      "The instance serving when the update started; null for the first install.",
    ),
    new_instance: instanceRef("The slot the new version goes into, once chosen."),
    error: Type.Union(
      [
        Type.Object(
          { code: StringEnum(updateErrorCodes), message: Type.String() },
          { additionalProperties: false },
        ),
        Type.Null(),
      ],
      { description: "Why the update failed or was rolled back." },
    ),
    signature: Type.Union(
      [
        Type.Object(
          {
            key_id: Type.String({
              description: "The trusted minisign key that signed, as minisign shows it.",
            }),
            signed_file: Type.String({
              description: "What the signature covers: the artifact itself, or the `SHA256SUMS` listing it.",
            }),
            trusted_comment: Type.String({
              description: "The signature's trusted comment (signed with it).",
            }),
          },
          { additionalProperties: false },
        ),
        Type.Null(),
      ],
      {
        description:
          "The minisign signature that authenticated the artifact (with `HOSTKEEPER_OPERATOR_TRUSTED_KEYS`), once verified; null before that and without trusted keys.",
      },
    ),
    history: Type.Array(
      Type.Object({ state: Type.String(), at: Type.String() }, { additionalProperties: false }),
      { description: "Every state the update has been in, oldest first, with the time it entered it." },
    ),
    created_at: Type.String(),
    updated_at: Type.String(),
    finished_at: Type.Union([Type.String(), Type.Null()]),
    links: Type.Object(
      { status: Type.String({ description: "Path of this status, relative to the base URL." }) },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false, $id: "OperatorUpdateStatus", title: "OperatorUpdateStatus" },
);
export type UpdateStatus = Static<typeof UpdateStatusSchema>;

export const RunningInstanceSchema = Type.Object(
  {
    slot: SlotSchema,
    version: Type.String(),
    port: Type.Integer({ description: "Loopback port the instance listens on." }),
    pid: Type.Integer({ description: "PID of the instance, also the id of its process group." }),
    started_at: Type.String(),
    health: Type.Object(
      {
        status: Type.Literal("healthy"),
        checked_at: Type.String({ description: "When the agent checked the health path for this answer." }),
      },
      { additionalProperties: false },
    ),
    update_process_id: Type.String({ description: "The update that installed this version." }),
  },
  { additionalProperties: false, $id: "OperatorRunningInstance", title: "OperatorRunningInstance" },
);
export type RunningInstance = Static<typeof RunningInstanceSchema>;

export const ActiveInstanceSchema = Type.Object(
  {
    slot: SlotSchema,
    version: Type.String(),
    port: Type.Union([Type.Integer(), Type.Null()], { description: "Loopback port of its last start." }),
    pid: Type.Union([Type.Integer(), Type.Null()], { description: "PID of its last start." }),
    running: Type.Boolean({ description: "Whether that process runs now (no health check)." }),
    started_at: Type.Union([Type.String(), Type.Null()]),
    update_process_id: Type.Union([Type.String(), Type.Null()], {
      description: "The update that installed this version.",
    }),
  },
  {
    additionalProperties: false,
    $id: "OperatorActiveInstance",
    title: "OperatorActiveInstance",
    description: "The operator instance the operator's route points at, as the agent recorded it.",
  },
);
export type ActiveInstance = Static<typeof ActiveInstanceSchema>;

export const UpdateIdParamsSchema = Type.Object(
  { update_process_id: Type.String({ minLength: 1, maxLength: 256 }) },
  { additionalProperties: false },
);

export const operatorSharedSchemas = [
  OperatorUpdateRequestSchema,
  UpdateStatusSchema,
  RunningInstanceSchema,
  ActiveInstanceSchema,
];
