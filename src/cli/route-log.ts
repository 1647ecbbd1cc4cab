import { connect } from "./agent.js";
import { type Command, positiveInteger } from "./args.js";
import { INTERRUPTED_EXIT, pause, untilInterrupted } from "./follow.js";
import { print } from "./output.js";

/* `hostkeeper routes log`: a route's access log, its newest lines or a live tail. */

/** How often a live tail asks for the newest lines. */
const POLL_MS = 1_000;
/** The newest lines a live tail asks for each time: more than a busy second brings. */
const FOLLOW_LINES = 1_000;

interface LogEntry {
  ts?: number;
  status?: number;
  duration?: number;
  size?: number;
  request?: { method?: string; host?: string; uri?: string; remote_ip?: string };
}

/** One entry in a line: `2026-11-28T09:12:00.123Z 200 GET shop.example.com/cart 1.2 ms 512 B 203.0.113.7`. */
function entryLine(e: LogEntry): string {
  const r = e.request ?? {};
  const when = typeof e.ts === "number" ? new Date(e.ts * 1000).toISOString() : "-";
  const ms = typeof e.duration === "number" ? `${(e.duration * 1000).toFixed(1)} ms` : "-";
  return [
    when,
    e.status ?? "-",
    r.method ?? "-",
    `${r.host ?? ""}${r.uri ?? ""}`,
    ms,
    `${e.size ?? 0} B`,
    r.remote_ip ?? "-",
  ].join(" ");
}

/** Where the entries not printed yet begin in `next`: after the last one printed, else (a gap) at 0. */
function firstNew(printed: string | undefined, next: readonly string[]): number {
  return printed === undefined ? 0 : next.lastIndexOf(printed) + 1;
}

const log: Command = {
  words: ["routes", "log"],
  args: "<id>",
  positionals: { min: 1, max: 1 },
  summary: "Show the newest lines of a route's access log, or follow it live.",
  details: [
    "A line per request: time, status, method, host and path, duration, size, client address.",
    "With --json, the entries: the API's array, or with --follow one JSON line per entry.",
    "--follow prints the newest lines, then each new one as it comes, until Ctrl-C (exit 130).",
  ],
  options: [
    {
      name: "lines",
      value: "N",
      doc: "How many of the newest lines (1-10000, default 100).",
      parse: positiveInteger,
    },
    { name: "follow", doc: "Keep printing new lines as Caddy writes them, until Ctrl-C." },
  ],
  timeoutSeconds: 30,
  run: async (inv) => {
    const id = inv.positionals[0] as string;
    const lines = (inv.options.lines as number | undefined) ?? 100;
    const client = connect(inv.timeoutMs);
    const read = async (n: number) => {
      const path = `/v1/proxy/routes/${encodeURIComponent(id)}/access-log?lines=${n}`;
      return (await client.call("GET", path)).text;
    };
    const first = await read(lines);
    if (!inv.options.follow) {
      if (inv.json) print(first);
      else for (const e of JSON.parse(first) as LogEntry[]) print(entryLine(e));
      return 0;
    }
    return follow(first, read, inv.json);
  },
};

/** Prints `first`'s entries, then each new one every POLL_MS until SIGINT; resolves with 130 then. */
async function follow(first: string, read: (n: number) => Promise<string>, json: boolean): Promise<number> {
  let last: string | undefined;
  const take = (text: string) => {
    const entries = JSON.parse(text) as LogEntry[];
    // Each entry's JSON: what --json prints, and how an entry already printed is known again.
    const texts = entries.map((e) => JSON.stringify(e));
    for (let i = firstNew(last, texts); i < entries.length; i++)
      print(json ? (texts[i] as string) : entryLine(entries[i] as LogEntry));
    last = texts.at(-1) ?? last;
  };
  return untilInterrupted(async (stop) => {
    take(first);
    for (;;) {
      if (!(await pause(POLL_MS, stop))) return INTERRUPTED_EXIT;
      take(await read(FOLLOW_LINES));
    }
  });
}

export const routeLogCommands: Command[] = [log];
