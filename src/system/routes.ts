import type { DenyList } from "../events/egress.js";
import { callbackUrlError } from "../http/callback-url.js";
import { bodyFieldErrors, type FieldError, validationFailed } from "../http/errors.js";
import { parsePrefer, preferredWaitSeconds } from "../http/prefer.js";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import { settledWithin } from "../util/timers.js";
import { RefTo } from "../util/typebox.js";
import {
  ApplyIdParamsSchema,
  ApplyResultSchema,
  ApplyStatusSchema,
  ApplyUpdatesRequestSchema,
  DownloadUpdatesRequestSchema,
} from "./apply-schemas.js";
import { minAgeOf } from "./candidates.js";
import { CheckQuerySchema, DownloadResultSchema, SystemStatusSchema } from "./check-schemas.js";
import { ComplianceSchema } from "./compliance.js";
import { ApplyHistoryQuerySchema, ApplyHistorySchema } from "./history-schemas.js";
import { ScheduleRequestSchema, ScheduleSchema } from "./schedule/schemas.js";
import { type ScheduleService, scheduleIssues } from "./schedule/service.js";
import { systemSharedSchemas } from "./schemas.js";
import type { SystemService } from "./service.js";

/** What a request with a body that runs the package manager may answer. */
const PACKAGE_RUN_PROBLEMS = problemResponses(
  "validation_failed",
  "malformed_body",
  "payload_too_large",
  "unsupported_media_type",
  "package_manager_busy",
  "package_manager_failed",
  "insufficient_storage",
);

/** The longest `Prefer: wait=` an async apply honours before answering 202. */
export const MAX_PREFER_WAIT_SECONDS = 60;

const checkUpdates = {
  tags: ["system"],
  operationId: "checkUpdates",
  summary: "Check for system package updates",
  description:
    "Refreshes the package lists (a failure to fetch any of them is an error), then reports the available updates and whether a reboot is required. Waits while another apply of this agent or another program holds the package manager, up to `HOSTKEEPER_PACKAGE_LOCK_TIMEOUT_MS`. Request body: none. With `min_age_days` or `security_min_age_days` in the query (a schedule's, say), each update an apply with that minimum would defer is `deferred` (`held_reason`) and says when it is `eligible_at`.",
  querystring: CheckQuerySchema,
  response: {
    200: jsonContent(RefTo(SystemStatusSchema), "The System object, with the details of each update."),
    ...problemResponses("package_manager_busy", "package_manager_failed"),
  },
};

const applyUpdates = {
  tags: ["system"],
  operationId: "applyUpdates",
  summary: "Apply system package updates",
  description: `Installs the updates of \`update_type\` non-interactively, keeping configuration files the administrator changed, and never upgrading a package of \`HOSTKEEPER_HOLD_PACKAGES\`. The answer says what changed and what was held back. Every apply, failed or not, is recorded in the apply history. With \`Prefer: respond-async\` (RFC 7240) the answer is 202 at once, with the apply's status and its \`Location\` (\`GET /v1/system/applies/{id}\`), and \`Preference-Applied: respond-async\`; with \`wait=N\` too, the answer waits up to N seconds (at most ${MAX_PREFER_WAIT_SECONDS}) for the apply to finish first. A \`callback_url\` receives a \`system_update\` event at each state change, in either mode. When it has packages to change, the host's pre-apply hooks run before the package manager changes anything (one that fails refuses the apply: \`hook_failed\`) and its post-apply hooks after (their failures are recorded in \`hooks\`); see docs/api/system-updates.md.`,
  body: RefTo(ApplyUpdatesRequestSchema),
  response: {
    200: jsonContent(RefTo(ApplyResultSchema), "What the apply changed."),
    202: {
      ...jsonContent(
        RefTo(ApplyStatusSchema),
        "Accepted (`Prefer: respond-async`): the apply's status, `queued` (or further on, after `wait=`).",
      ),
      headers: {
        location: { type: "string", description: "`/v1/system/applies/{id}`." },
        "preference-applied": {
          type: "string",
          description: "`respond-async` (and `wait=N` when it waited).",
        },
      },
    },
    ...PACKAGE_RUN_PROBLEMS,
    ...problemResponses("hook_failed"),
  },
};

const getApply = {
  tags: ["system"],
  operationId: "getApply",
  summary: "Get the status of an apply",
  description:
    "Any apply, asynchronous or not: its state and the history of its states, progress (packages downloaded and installed of total), the updates in scope, what changed once it is over, the package manager's recovery when one ran, the reboot that followed (boot id and kernel before and after), and the error of a failed or interrupted apply.",
  params: ApplyIdParamsSchema,
  response: {
    200: jsonContent(RefTo(ApplyStatusSchema), "The apply's status."),
    ...problemResponses("validation_failed", "apply_not_found"),
  },
};

const downloadUpdates = {
  tags: ["system"],
  operationId: "downloadUpdates",
  summary: "Download updates without installing them",
  description:
    "Refreshes the package lists and downloads what an apply of `update_type` would install (the same selection, held packages left out) into the package manager's cache (apt: `--download-only`; dnf: `--downloadonly`), so that a later apply only installs. Installs nothing. Waits for the package manager like check and apply.",
  body: RefTo(DownloadUpdatesRequestSchema),
  response: {
    200: jsonContent(RefTo(DownloadResultSchema), "What was downloaded, and how many bytes."),
    ...PACKAGE_RUN_PROBLEMS,
  },
};

const listApplyHistory = {
  tags: ["system"],
  operationId: "listApplyHistory",
  summary: "List past applies",
  description:
    "Every apply-updates call, newest first: who asked (remote address, user agent, request id), the update type, the outcome or error, what changed, and how long it took.",
  querystring: ApplyHistoryQuerySchema,
  response: {
    200: jsonContent(RefTo(ApplyHistorySchema), "The applies."),
    ...problemResponses("validation_failed"),
  },
};

const getCompliance = {
  tags: ["system"],
  operationId: "getCompliance",
  summary: "The host's patch state at a glance",
  description:
    "Security updates pending and the age of the oldest (since the agent first saw it offered), CVEs pending and the oldest's age, the last successful apply, and whether a reboot is required and since when: from the agent's records, as of its last check and the applies since. The same figures are on `/metrics` (docs/system-updates.md, Compliance).",
  response: { 200: jsonContent(RefTo(ComplianceSchema), "The host's patch state."), ...problemResponses() },
};

const scheduleWindows =
  'Each window opens on its `days` at its local `start` in `timezone` and stays open `duration_minutes`; each opening is a slot, in which the agent applies at most once (an ordinary apply with `trigger: "schedule"`, in the apply history, taking the same lock, its events sent to `callback_url`).';

const getSchedule = {
  tags: ["system"],
  operationId: "getSchedule",
  summary: "Get the maintenance schedule",
  description: `${scheduleWindows} The answer adds \`next_run_at\` and the last 50 slots' \`runs\`.`,
  response: {
    200: jsonContent(RefTo(ScheduleSchema), "The schedule, its next run and its last runs."),
    ...problemResponses("schedule_not_found"),
  },
};

const putSchedule = {
  tags: ["system"],
  operationId: "setSchedule",
  summary: "Set the maintenance schedule",
  description: `Sets or replaces the one schedule. ${scheduleWindows} A slot open when the schedule is set, and one whose start passed while the agent was down, runs when the agent sees it open; a slot that closed while the agent was down is recorded \`missed\`. A slot is known by its start: one with a run record never runs again, whatever schedule is set later.`,
  body: RefTo(ScheduleRequestSchema),
  response: {
    200: jsonContent(RefTo(ScheduleSchema), "The schedule as set, with its next run."),
    ...problemResponses("validation_failed", "malformed_body", "payload_too_large", "unsupported_media_type"),
  },
};

const deleteSchedule = {
  tags: ["system"],
  operationId: "deleteSchedule",
  summary: "Remove the maintenance schedule",
  description:
    "No slot starts after this; an apply under way goes on. The run records stay, and a schedule set later shows them.",
  response: {
    204: { type: "null", description: "Removed." },
    ...problemResponses("schedule_not_found"),
  },
};

export function registerSystemRoutes(
  app: App,
  service: SystemService,
  schedule: ScheduleService,
  deny: DenyList,
): void {
  for (const s of systemSharedSchemas) app.addSchema(s);

  app.post("/v1/system/check-updates", { schema: checkUpdates }, async (request) =>
    service.check(minAgeOf(request.query)),
  );

  app.post("/v1/system/apply-updates", { schema: applyUpdates }, async (request, reply) => {
    const { update_type: type, auto_reboot: autoReboot = false, callback_url: callback } = request.body;
    const origin = { exclude: request.body.exclude ?? [], minAge: minAgeOf(request.body) };
    const callbackError = callbackUrlError(callback, deny);
    if (callbackError) throw validationFailed([callbackError]);
    const who = {
      remote_address: request.ip,
      user_agent: request.headers["user-agent"] ?? null,
      request_id: request.id,
    };
    const prefs = parsePrefer(request.headers.prefer);
    if (!prefs.has("respond-async")) return service.apply(type, autoReboot, who, callback, origin);
    const { status, done } = await service.startApply(type, autoReboot, who, callback, origin);
    const wait = preferredWaitSeconds(prefs);
    const applied = ["respond-async"];
    if (wait !== undefined && wait > 0) {
      const seconds = Math.min(wait, MAX_PREFER_WAIT_SECONDS);
      await settledWithin(done, seconds * 1000);
      applied.push(`wait=${seconds}`);
    }
    return reply
      .code(202)
      .header("location", status.links.status)
      .header("preference-applied", applied.join(", "))
      .send(service.status(status.id));
  });

  app.get("/v1/system/applies/:apply_id", { schema: getApply }, async (request) =>
    service.status(Number(request.params.apply_id)),
  );

  app.post("/v1/system/download-updates", { schema: downloadUpdates }, async (request) =>
    service.download(request.body.update_type, {
      exclude: request.body.exclude ?? [],
      minAge: minAgeOf(request.body),
    }),
  );

  app.get("/v1/system/apply-history", { schema: listApplyHistory }, async (request) => ({
    applies: service.history(request.query.limit ?? 50),
  }));

  app.get("/v1/system/compliance", { schema: getCompliance }, async () => service.compliance());

  app.get("/v1/system/schedule", { schema: getSchedule }, async () => schedule.get());

  app.put("/v1/system/schedule", { schema: putSchedule }, async (request) => {
    // Every bad field in one answer.
    const errors: FieldError[] = [
      callbackUrlError(request.body.callback_url, deny),
      ...bodyFieldErrors(scheduleIssues(request.body)),
    ].filter((e) => e !== undefined);
    if (errors.length > 0) throw validationFailed(errors);
    return schedule.set(request.body);
  });

  app.delete("/v1/system/schedule", { schema: deleteSchedule }, async (_request, reply) => {
    schedule.remove();
    return reply.code(204).send();
  });
}
