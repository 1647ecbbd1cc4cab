import { highestSeverity, type PackageUpdate } from "../system/packages/package-manager.js";
import type { ApplyRecord, ApplyStatus, DownloadResult, SystemStatus } from "../system/schemas.js";
import { plural } from "../util/text.js";
import { type AgentClient, connect } from "./agent.js";
import { type Command, type Invocation, positiveInteger, UsageError, usageLine } from "./args.js";
import { follow, restartLine, seconds, terminal } from "./follow.js";
import { cell, print, table } from "./output.js";

type CheckAnswer = Omit<SystemStatus, "updates"> & { updates: PackageUpdate[] };

const check: Command = {
  words: ["updates", "check"],
  positionals: { min: 0, max: 0 },
  summary: "Refresh the package lists and list the available updates.",
  details: [
    "POST /v1/system/check-updates: the agent waits for the package manager's lock and runs it, which",
    "can take minutes. `hostkeeper updates apply` applies them.",
  ],
  timeoutSeconds: 1800,
  run: async (inv) => {
    const answer = await connect(inv.timeoutMs).call("POST", "/v1/system/check-updates");
    if (inv.json) {
      print(answer.text);
      return 0;
    }
    const s = JSON.parse(answer.text) as CheckAnswer;
    const count = s.security_updates + s.regular_updates;
    print(
      `${plural(count, "update")} (${s.security_updates} security, ${s.regular_updates} regular); reboot required: ${cell(s.reboot_required)}; ${s.package_manager}, checked ${s.checked_at}`,
    );
    if (s.updates.length > 0)
      print(
        table(
          ["PACKAGE", "ARCH", "CURRENT", "NEW", "SECURITY", "SEVERITY", "CVES", "HELD"],
          s.updates.map((u) => [
            u.name,
            u.arch,
            u.current_version,
            u.new_version,
            u.security ? cell(u.security_version) : "-",
            highestSeverity(u.advisories),
            String(new Set(u.advisories.flatMap((a) => a.cves)).size),
            u.held_reason ?? "-",
          ]),
        ),
      );
    for (const line of restartLine(s.services_restart_required)) print(line);
    return 0;
  },
};

const history: Command = {
  words: ["updates", "history"],
  positionals: { min: 0, max: 0 },
  summary: "List past applies of updates, newest first (GET /v1/system/apply-history).",
  options: [
    { name: "limit", value: "N", doc: "How many to list, 1-1000 (default 50).", parse: positiveInteger },
  ],
  timeoutSeconds: 30,
  run: async (inv) => {
    const limit = inv.options.limit;
    const answer = await connect(inv.timeoutMs).call(
      "GET",
      `/v1/system/apply-history${limit === undefined ? "" : `?limit=${limit}`}`,
    );
    if (inv.json) {
      print(answer.text);
      return 0;
    }
    const { applies } = JSON.parse(answer.text) as { applies: ApplyRecord[] };
    if (applies.length === 0) {
      print("no applies recorded");
      return 0;
    }
    print(
      table(
        [
          "ID",
          "STARTED",
          "TYPE",
          "OUTCOME",
          "UPGRADED",
          "INSTALLED",
          "REMOVED",
          "REBOOT",
          "DURATION",
          "ERROR",
        ],
        applies.map((a) => [
          String(a.id),
          a.started_at,
          a.update_type,
          a.outcome,
          String(a.upgraded.length),
          String(a.installed.length),
          String(a.removed.length),
          a.reboot_scheduled ? "scheduled" : a.reboot_required ? "required" : "-",
          a.duration_ms === null ? "-" : `${(a.duration_ms / 1000).toFixed(1)} s`,
          cell(a.error?.code),
        ]),
      ),
    );
    return 0;
  },
};

/** `--download-only`: the synchronous download-updates, with the time it has taken so far on a terminal. */
async function downloadOnly(client: AgentClient, type: string, inv: Invocation): Promise<number> {
  const started = Date.now();
  const { tty } = terminal();
  const saying = () => `downloading ${type} updates (${seconds(Date.now() - started)})`;
  const ticker =
    tty && !inv.json ? setInterval(() => process.stdout.write(`\r\x1b[2K${saying()}`), 200) : undefined;
  if (!tty && !inv.json) print(`downloading ${type} updates`);
  let text: string;
  try {
    text = (await client.call("POST", "/v1/system/download-updates", { body: { update_type: type } })).text;
  } finally {
    clearInterval(ticker);
    if (ticker) process.stdout.write("\n");
  }
  if (inv.json) {
    print(text);
    return 0;
  }
  const d = JSON.parse(text) as DownloadResult;
  print(
    `downloaded ${plural(d.downloaded.length, "file")} (${d.bytes} bytes) for ${plural(d.packages.length, "package")} in ${seconds(d.duration_ms)}`,
  );
  if (d.packages.length > 0)
    print(
      table(
        ["PACKAGE", "ARCH", "CURRENT", "NEW"],
        d.packages.map((p) => [p.name, p.arch, p.current_version, p.new_version]),
      ),
    );
  return 0;
}

const apply: Command = {
  words: ["updates", "apply"],
  positionals: { min: 0, max: 0 },
  summary: "Apply updates in the background and follow the apply until it is over.",
  details: [
    "POST /v1/system/apply-updates with Prefer: respond-async (security updates unless --full), then",
    "GET /v1/system/applies/<id> every half second: packages downloaded and installed of the total, the",
    "package worked on and the time so far, on one live line on a terminal, a line per change otherwise;",
    "--json prints each new status record, one per line. Exits 1 when the apply fails or is refused.",
    "Ctrl-C stops following only: the apply goes on (hostkeeper updates follow <id>), exit code 130.",
    "--download-only runs POST /v1/system/download-updates instead and waits for it.",
  ],
  options: [
    { name: "full", doc: "All updates, not only security ones (update_type full)." },
    { name: "reboot", doc: "Reboot after the apply when it requires one (auto_reboot)." },
    { name: "download-only", doc: "Only download what the apply would install; installs nothing." },
  ],
  timeoutSeconds: 1800,
  run: async (inv) => {
    const type = inv.options.full === true ? "full" : "security";
    const downloadOnlyAsked = inv.options["download-only"] === true;
    if (downloadOnlyAsked && inv.options.reboot === true)
      throw new UsageError("--reboot does not go with --download-only", usageLine(apply));
    const client = connect(inv.timeoutMs);
    if (downloadOnlyAsked) return downloadOnly(client, type, inv);
    const answer = await client.call("POST", "/v1/system/apply-updates", {
      body: { update_type: type, auto_reboot: inv.options.reboot === true },
      headers: { prefer: "respond-async" },
    });
    const status = JSON.parse(answer.text) as ApplyStatus;
    return follow(client, status.id, { json: inv.json, ...terminal() }, answer.text);
  },
};

const followCommand: Command = {
  words: ["updates", "follow"],
  args: "<apply_id>",
  positionals: { min: 1, max: 1 },
  summary: "Follow an apply (any, also one that is over) until it is over, as updates apply does.",
  details: [
    "GET /v1/system/applies/<id> every half second, shown as `updates apply` shows it; an apply that is",
    "over is shown once. Exits 1 when the apply failed or was interrupted, 130 on Ctrl-C.",
  ],
  timeoutSeconds: 30,
  run: async (inv) => {
    let id: number;
    try {
      id = positiveInteger(inv.positionals[0] as string);
    } catch (err) {
      throw new UsageError(`<apply_id> ${(err as Error).message}`, usageLine(followCommand));
    }
    return follow(connect(inv.timeoutMs), id, { json: inv.json, ...terminal() });
  },
};

export const updatesCommands: Command[] = [check, apply, followCommand, history];
