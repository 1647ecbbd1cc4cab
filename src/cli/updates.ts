import { highestSeverity, type PackageUpdate } from "../system/package-manager.js";
import type { ApplyRecord, SystemStatus } from "../system/schemas.js";
import { plural } from "../util/text.js";
import { connect } from "./agent.js";
import { type Command, positiveInteger } from "./args.js";
import { cell, print, table } from "./output.js";

type CheckAnswer = Omit<SystemStatus, "updates"> & { updates: PackageUpdate[] };

const check: Command = {
  words: ["updates", "check"],
  positionals: { min: 0, max: 0 },
  summary: "Refresh the package lists and list the available updates.",
  details: [
    "POST /v1/system/check-updates: the agent waits for the package manager's lock and runs it, which",
    "can take minutes.",
    "Applying updates is done through the API only.",
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

export const updatesCommands: Command[] = [check, history];
