import { type Static, Type } from "@sinclair/typebox";
import { artifactErrorCodes } from "../operator/failure.js";
import { NullableString, StringEnum } from "../util/typebox.js";

/** An agent update's states; `completed`, `rolled_back` and `failed` are final. */
export const agentUpdateStates = [
  "downloading",
  "verifying",
  "installing",
  "restarting",
  "completed",
  "rolled_back",
  "failed",
] as const;
export type AgentUpdateState = (typeof agentUpdateStates)[number];
export const FINAL_STATES: ReadonlySet<AgentUpdateState> = new Set(["completed", "rolled_back", "failed"]);

/** Why an agent update failed or was rolled back: `error.code` in its status and events. */
export const agentUpdateErrorCodes = [
  ...artifactErrorCodes,
  "package_invalid",
  "downgrade_refused",
  "rollback_unavailable",
  "install_failed",
  "not_ready",
  "updater_failed",
  "agent_restarted",
  "internal_error",
] as const;
export type AgentUpdateErrorCode = (typeof agentUpdateErrorCodes)[number];

const VERSION_PATTERN = "^[0-9][A-Za-z0-9.+~-]{0,63}$";
const CHECKSUM_PATTERN = "^(sha256:)?[0-9a-fA-F]{64}$";
const PACKAGE_URL_PATTERN = "^[^?#]*/[A-Za-z0-9][A-Za-z0-9._+~-]{0,200}\\.(deb|rpm)$";

export const AgentUpdateRequestSchema = Type.Object(
  {
    version: Type.Optional(
      Type.String({
        pattern: VERSION_PATTERN,
        description:
          "The version to install: the package `<source>/<version>/hostkeeper_<version>_<arch>.deb` (or `hostkeeper-<version>-1.<arch>.rpm`) for this host's package format and architecture. One of `version` and `url`.",
        examples: ["0.2.0"],
      }),
    ),
    url: Type.Optional(
      Type.String({
        maxLength: 2048,
        // The last segment is the file's name in the update's folder: plain characters only, no escapes.
        pattern: PACKAGE_URL_PATTERN,
        description:
          "The package's own URL (https, or `s3://bucket/key`), ending in a plain file name (letters, digits, `.`, `_`, `+`, `~`, `-`) with `.deb` or `.rpm` as this host installs. Its signature is `<url>.minisig`, else a signed `SHA256SUMS` beside it. One of `version` and `url`.",
      }),
    ),
    artifact_source: Type.Optional(
      NullableString(
        Type.String({
          maxLength: 2048,
          description:
            "With `version`: the release prefix (`https://`, `s3://bucket/prefix`). Omitted or null: `HOSTKEEPER_AGENT_UPDATE_SOURCE`.",
        }),
      ),
    ),
    checksum: Type.Optional(
      Type.String({
        pattern: CHECKSUM_PATTERN,
        description:
          "SHA-256 the package must have: `sha256:<64 hex>` or 64 hex digits; checked besides its signature.",
      }),
    ),
    allow_downgrade: Type.Optional(
      Type.Boolean({
        description: "Install a version older than (or the same as) the running one. Default false: refused.",
      }),
    ),
    callback_url: Type.Optional(
      Type.String({
        maxLength: 2048,
        description:
          "Absolute http(s) URL that receives an `agent_update` event at each state change; `hostkeeper:connection`: over the connection to the control plane (docs/connect.md).",
      }),
    ),
  },
  { additionalProperties: false, $id: "AgentUpdateRequest", title: "AgentUpdateRequest" },
);
export type AgentUpdateRequest = Static<typeof AgentUpdateRequestSchema>;

export const AgentUpdateIdParamsSchema = Type.Object(
  { id: Type.String({ maxLength: 64, description: "The update's id (`au_...`)." }) },
  { additionalProperties: false },
);

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T, description: string) =>
  Type.Union([t, Type.Null()], { description });

export const AgentUpdateStatusSchema = Type.Object(
  {
    id: Type.String(),
    state: StringEnum(agentUpdateStates, {
      description: "`completed`, `rolled_back` and `failed` are final.",
    }),
    from_version: Type.String({ description: "The agent's version when the update was asked for." }),
    to_version: Nullable(
      Type.String(),
      "The version to install: the request's, else the package's, once read.",
    ),
    package_url: Type.String({ description: "Where the package is downloaded from." }),
    package_format: StringEnum(["deb", "rpm"] as const),
    architecture: Type.String({
      description: "The package architecture (`amd64`, `arm64`, `x86_64`, `aarch64`).",
    }),
    progress: Type.Object(
      {
        bytes_downloaded: Type.Integer(),
        bytes_total: Nullable(Type.Integer(), "Unknown until the server says."),
      },
      { additionalProperties: false },
    ),
    signature: Nullable(
      Type.Object(
        {
          key_id: Type.String(),
          signed_file: Type.String({ description: "The package itself, or `SHA256SUMS`." }),
          trusted_comment: Type.String(),
        },
        { additionalProperties: false },
      ),
      "The minisign signature that authenticated the package, once checked.",
    ),
    error: Nullable(
      Type.Object(
        {
          code: StringEnum(agentUpdateErrorCodes),
          message: Type.String(),
        },
        { additionalProperties: false },
      ),
      "Why it failed or was rolled back.",
    ),
    history: Type.Array(
      Type.Object(
        { state: StringEnum(agentUpdateStates), at: Type.String() },
        { additionalProperties: false },
      ),
    ),
    created_at: Type.String(),
    updated_at: Type.String(),
    finished_at: Nullable(Type.String(), "When it reached a final state."),
    links: Type.Object({ status: Type.String() }, { additionalProperties: false }),
  },
  { additionalProperties: false, $id: "AgentUpdateStatus", title: "AgentUpdateStatus" },
);
export type AgentUpdateStatus = Static<typeof AgentUpdateStatusSchema>;

export const agentUpdateSharedSchemas = [AgentUpdateRequestSchema, AgentUpdateStatusSchema];
