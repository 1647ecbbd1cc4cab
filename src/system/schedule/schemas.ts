import { Type } from "@sinclair/typebox";
import { RefTo, StringEnum } from "../../util/typebox.js";
import { EXCLUDE_PATTERN, MAX_EXCLUDES } from "../packages/exclude.js";
import { WEEKDAYS } from "./windows.js";

/* The schemas of the maintenance schedule: the windows the agent applies updates in, and its runs. */

const Minutes = (description: string) => Type.Integer({ minimum: 0, maximum: 1440, description });

export const WindowSchema = Type.Object(
  {
    days: Type.Array(StringEnum(WEEKDAYS), {
      minItems: 1,
      maxItems: 7,
      description: "The local weekdays the window opens on (`mon`, `tue`, ... `sun`).",
    }),
    start: Type.String({
      pattern: "^(?:[01][0-9]|2[0-3]):[0-5][0-9]$",
      description:
        "Local time the window opens, `HH:MM`, 00:00-23:59. A time the clocks skip opens at the first minute after the skip; a time they repeat opens once, at its first occurrence.",
    }),
    duration_minutes: Type.Integer({
      minimum: 1,
      maximum: 1440,
      description: "How long the window stays open, 1-1440 minutes; it may run past midnight.",
    }),
  },
  { additionalProperties: false, $id: "MaintenanceWindow", title: "MaintenanceWindow" },
);

const scheduleFields = {
  windows: Type.Array(RefTo(WindowSchema), { minItems: 1, maxItems: 32 }),
  timezone: Type.String({
    minLength: 1,
    maxLength: 64,
    description: "The IANA time zone of the windows' days and times, e.g. `Europe/Berlin` or `UTC`.",
  }),
  update_type: StringEnum(["security", "full"], {
    description: "What each scheduled apply installs, as apply-updates' `update_type`.",
  }),
  reboot: StringEnum(["never", "if_required", "always"], {
    description:
      "`if_required`: reboot after an apply that leaves a reboot required; `always`: after every scheduled apply; either only when the reboot command would run before the window ends.",
  }),
};

const Days = (description: string) => Type.Integer({ minimum: 0, maximum: 365, description });

const Exclude = (description: string) =>
  Type.Array(Type.String({ pattern: EXCLUDE_PATTERN }), { maxItems: MAX_EXCLUDES, description });

export const ScheduleRequestSchema = Type.Object(
  {
    ...scheduleFields,
    download_ahead_minutes: Type.Optional(
      Minutes(
        "Default 0. Download the updates this many minutes before a window opens (as download-updates), so the window only installs; at most the shortest window's length.",
      ),
    ),
    random_delay_minutes: Type.Optional(
      Minutes(
        "Default 0. Start each apply up to this many minutes (drawn at random for each slot) after its window opens, to spread a fleet; at most the shortest window's length, and never past the window's end.",
      ),
    ),
    callback_url: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 2048,
        description:
          "Optional. Receives the signed `system_update` events of every scheduled apply, as apply-updates' `callback_url`.",
      }),
    ),
    min_age_days: Type.Optional(
      Days("Default 0. As apply-updates' `min_age_days`, for every scheduled apply."),
    ),
    security_min_age_days: Type.Optional(
      Days("Default 0. As apply-updates' `security_min_age_days`, for every scheduled apply."),
    ),
    exclude: Type.Optional(
      Exclude(
        "Default none. Package name patterns (shell globs) every scheduled apply keeps out, as apply-updates' `exclude`.",
      ),
    ),
  },
  { additionalProperties: false, $id: "ScheduleRequest", title: "ScheduleRequest" },
);

export const SCHEDULE_RUN_STATES = [
  "running",
  "completed",
  "failed",
  "interrupted",
  "missed",
  "refused",
] as const;

export const ScheduleRunSchema = Type.Object(
  {
    slot_start: Type.String({ format: "date-time", description: "When the window's slot opened (UTC)." }),
    state: StringEnum(SCHEDULE_RUN_STATES, {
      description:
        "`running`: its apply is under way; `completed` or `failed`: how its apply ended; `interrupted`: the agent stopped during the run, which never runs again; `missed`: the agent was not running while the slot was open; `refused`: the apply did not start (`reason` says why).",
    }),
    apply_id: Type.Optional(
      Type.Integer({ description: "The slot's apply, in the apply history and `/v1/system/applies/{id}`." }),
    ),
    reason: Type.Optional(Type.String({ description: "Why the run did not happen or did less than asked." })),
  },
  { additionalProperties: false, $id: "ScheduleRun", title: "ScheduleRun" },
);

export const ScheduleSchema = Type.Object(
  {
    ...scheduleFields,
    download_ahead_minutes: Minutes("Minutes before a window opens that its updates are downloaded."),
    random_delay_minutes: Minutes("The longest random delay of an apply after its window opens."),
    callback_url: Type.Union([Type.String(), Type.Null()]),
    min_age_days: Days("The minimum age of a regular update's version, in days."),
    security_min_age_days: Days("The minimum age of a security update's version, in days."),
    exclude: Exclude("The package name patterns every scheduled apply keeps out."),
    next_run_at: Type.String({
      format: "date-time",
      description:
        "When the next slot's apply is due (UTC): the slot's start, plus its random delay once that is drawn (when the scheduler plans the slot). A slot already open and not yet run counts.",
    }),
    runs: Type.Array(RefTo(ScheduleRunSchema), {
      maxItems: 50,
      description: "The last 50 slots the agent ran or recorded, newest first.",
    }),
  },
  { additionalProperties: false, $id: "Schedule", title: "Schedule" },
);
