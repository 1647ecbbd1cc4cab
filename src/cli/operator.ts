import type { RunningInstance, UpdateStatus } from "../operator/schemas.js";
import { connect } from "./agent.js";
import type { Command } from "./args.js";
import { cell, fields, print, table } from "./output.js";

const instance = (i: { slot: string; version: string } | null) => (i ? `${i.version} (${i.slot})` : "-");

function runningFields(r: RunningInstance): string {
  return fields([
    ["slot", r.slot],
    ["version", r.version],
    ["port", String(r.port)],
    ["pid", String(r.pid)],
    ["started", r.started_at],
    ["health", `${r.health.status} (checked ${r.health.checked_at})`],
    ["installed by", r.update_process_id],
  ]);
}

function updateFields(u: UpdateStatus): string {
  const { bytes_downloaded: done, bytes_total: total } = u.progress;
  return [
    fields([
      ["update", u.update_process_id],
      ["version", u.version],
      ["state", u.state],
      ["source", u.artifact_source],
      ["artifact", cell(u.artifact_url)],
      ["downloaded", `${done}${total === null ? "" : ` of ${total}`} bytes`],
      ["previous instance", instance(u.previous_instance)],
      ["new instance", instance(u.new_instance)],
      ["error", u.error ? `${u.error.code}: ${u.error.message}` : "-"],
      ["created", u.created_at],
      ["updated", u.updated_at],
      ["finished", cell(u.finished_at)],
    ]),
    "",
    table(
      ["STATE", "AT"],
      u.history.map((h) => [h.state, h.at]),
    ),
  ].join("\n");
}

const status: Command = {
  words: ["operator", "status"],
  args: "[<update_process_id>]",
  positionals: { min: 0, max: 1 },
  summary: "Show the running operator instance, or the status of one update.",
  details: [
    "Without an id: GET /v1/operator/running-instance (a problem when none is installed, running or healthy).",
    "With an id: GET /v1/operator/update/<id>, its state and the history of its states.",
  ],
  timeoutSeconds: 30,
  run: async (inv) => {
    const id = inv.positionals[0];
    const client = connect(inv.timeoutMs);
    const answer = await client.call(
      "GET",
      id === undefined ? "/v1/operator/running-instance" : `/v1/operator/update/${encodeURIComponent(id)}`,
    );
    if (inv.json) print(answer.text);
    else if (id === undefined) print(runningFields(JSON.parse(answer.text) as RunningInstance));
    else print(updateFields(JSON.parse(answer.text) as UpdateStatus));
    return 0;
  },
};

export const operatorCommands: Command[] = [status];
