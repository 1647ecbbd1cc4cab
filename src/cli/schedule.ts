import type { ScheduleView } from "../system/schedule/service.js";
import { connect } from "./agent.js";
import { type Command, type Invocation, UsageError, usageLine } from "./args.js";
import { readJsonInput } from "./files.js";
import { cell, fields, print, table } from "./output.js";

const PATH = "/v1/system/schedule";

const minutes = (raw: string): number => {
  if (!/^\d{1,4}$/.test(raw)) throw new Error(`must be a whole number of minutes, got "${raw}"`);
  return Number(raw);
};

/** The schedule for people: its settings, its windows, then its runs, newest first. */
function scheduleText(s: ScheduleView): string {
  const settings = fields([
    ["timezone", s.timezone],
    ["update type", s.update_type],
    ["reboot", s.reboot],
    ["download ahead", `${s.download_ahead_minutes} min`],
    ["random delay", `up to ${s.random_delay_minutes} min`],
    ["callback", cell(s.callback_url)],
    ["next run", s.next_run_at],
  ]);
  const windows = table(
    ["DAYS", "START", "MINUTES"],
    s.windows.map((w) => [w.days.join(","), w.start, String(w.duration_minutes)]),
  );
  const runs =
    s.runs.length === 0
      ? "no runs recorded"
      : table(
          ["SLOT", "STATE", "APPLY", "REASON"],
          s.runs.map((r) => [r.slot_start, r.state, cell(r.apply_id), cell(r.reason)]),
        );
  return [settings, "", windows, "", runs].join("\n");
}

const show: Command = {
  words: ["schedule", "show"],
  positionals: { min: 0, max: 0 },
  summary: "Show the maintenance schedule, its next run and its last runs (GET /v1/system/schedule).",
  details: ["Without a schedule the agent answers 404 schedule_not_found (exit code 1)."],
  timeoutSeconds: 30,
  run: async (inv) => {
    const answer = await connect(inv.timeoutMs).call("GET", PATH);
    print(inv.json ? answer.text : scheduleText(JSON.parse(answer.text) as ScheduleView));
    return 0;
  },
};

/** Window flags: with --file none of them may be given, without it the window's three are required. */
const WINDOW_FLAGS = [
  "days",
  "start",
  "duration",
  "timezone",
  "type",
  "reboot",
  "download-ahead",
  "random-delay",
  "callback-url",
];

/** The body of the PUT: the file as it is (the agent checks it), or the one window the flags describe. */
function scheduleBody(inv: Invocation): unknown {
  const usage = usageLine(set);
  const o = inv.options;
  const file = o.file;
  if (typeof file === "string") {
    const given = WINDOW_FLAGS.filter((f) => o[f] !== undefined);
    if (given.length > 0)
      throw new UsageError(`--file cannot be combined with --${given.join(", --")}`, usage);
    return readJsonInput(file);
  }
  const missing = ["days", "start", "duration"].filter((f) => o[f] === undefined);
  if (missing.length > 0)
    throw new UsageError(`missing --${missing.join(", --")} (or a --file with the schedule)`, usage);
  return {
    windows: [
      { days: String(o.days).split(","), start: String(o.start), duration_minutes: Number(o.duration) },
    ],
    // The agent runs on this host: its zone is the one people there mean.
    timezone: typeof o.timezone === "string" ? o.timezone : Intl.DateTimeFormat().resolvedOptions().timeZone,
    update_type: typeof o.type === "string" ? o.type : "security",
    reboot: typeof o.reboot === "string" ? o.reboot : "never",
    ...(o["download-ahead"] === undefined ? {} : { download_ahead_minutes: o["download-ahead"] }),
    ...(o["random-delay"] === undefined ? {} : { random_delay_minutes: o["random-delay"] }),
    ...(o["callback-url"] === undefined ? {} : { callback_url: o["callback-url"] }),
  };
}

const set: Command = {
  words: ["schedule", "set"],
  positionals: { min: 0, max: 0 },
  summary: "Set (or replace) the maintenance schedule: one window from the flags, or any from --file.",
  details: [
    "PUT /v1/system/schedule. From flags, one window: --days, --start and --duration are required.",
    "--file takes the request body as the API does (several windows), `-` for standard input.",
    "The agent checks every field and names each bad one (as body.windows[0].start, ...).",
  ],
  options: [
    {
      name: "days",
      value: "mon,tue,...",
      doc: "Weekdays the window opens on (mon tue wed thu fri sat sun).",
    },
    { name: "start", value: "HH:MM", doc: "Local time the window opens, 00:00-23:59." },
    { name: "duration", value: "MINUTES", doc: "How long it stays open, 1-1440.", parse: minutes },
    {
      name: "timezone",
      value: "ZONE",
      doc: "IANA time zone of days and times (default this host's, as the CLI sees it).",
    },
    { name: "type", value: "security|full", doc: "What each apply installs (default security)." },
    {
      name: "reboot",
      value: "never|if_required|always",
      doc: "Reboot policy inside the window (default never).",
    },
    {
      name: "download-ahead",
      value: "MINUTES",
      doc: "Download this long before the window opens.",
      parse: minutes,
    },
    {
      name: "random-delay",
      value: "MINUTES",
      doc: "Start up to this long after it opens, at random.",
      parse: minutes,
    },
    { name: "callback-url", value: "URL", doc: "Send each scheduled apply's events to this URL." },
    { name: "file", value: "PATH", doc: "The schedule as JSON (the API's request body); `-` reads stdin." },
  ],
  timeoutSeconds: 30,
  run: async (inv) => {
    const body = scheduleBody(inv);
    const answer = await connect(inv.timeoutMs).call("PUT", PATH, { body });
    print(inv.json ? answer.text : scheduleText(JSON.parse(answer.text) as ScheduleView));
    return 0;
  },
};

const clear: Command = {
  words: ["schedule", "clear"],
  positionals: { min: 0, max: 0 },
  summary: "Remove the maintenance schedule (DELETE /v1/system/schedule); an apply under way goes on.",
  details: ["With --json nothing is printed: the API answers 204 without a body."],
  timeoutSeconds: 30,
  run: async (inv) => {
    await connect(inv.timeoutMs).call("DELETE", PATH);
    if (!inv.json) print("maintenance schedule removed");
    return 0;
  },
};

export const scheduleCommands: Command[] = [show, set, clear];
