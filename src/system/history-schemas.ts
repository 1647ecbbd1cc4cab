import { Type } from "@sinclair/typebox";
import { RefTo, StringEnum } from "../util/typebox.js";
import { APPLY_STATES, ApplyTriggerSchema, Changes, ServicesRestart } from "./apply-schemas.js";
import { PackageManagerName } from "./check-schemas.js";

/* The schemas of the apply history: who asked for each apply, and how it ended. */

export const RequesterSchema = Type.Object(
  {
    remote_address: Type.String({
      description: "Address the request came from; `local` for a scheduled apply, which the agent started.",
    }),
    user_agent: Type.Union([Type.String(), Type.Null()]),
  },
  { additionalProperties: false },
);

export const ApplyRecordSchema = Type.Object(
  {
    id: Type.Integer(),
    request_id: Type.String({
      description:
        "The request's `x-request-id` header when it had a usable one (1-128 characters of `A-Z a-z 0-9 . _ : / + = @ -`), else the id the agent generated for the request; for a scheduled apply, `schedule:` and its slot's start.",
    }),
    requested_by: RequesterSchema,
    trigger: ApplyTriggerSchema,
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
  { applies: Type.Array(RefTo(ApplyRecordSchema), { description: "Newest first." }) },
  { additionalProperties: false, $id: "ApplyHistory", title: "ApplyHistory" },
);

export const ApplyHistoryQuerySchema = Type.Object(
  {
    limit: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 1000,
        description: "How many applies to list, 1-1000; default 50.",
      }),
    ),
  },
  { additionalProperties: false },
);
