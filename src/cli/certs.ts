import type { CertificateEntry } from "../certificates/entries.js";
import { connect } from "./agent.js";
import type { Command } from "./args.js";
import { readInput } from "./files.js";
import { cell, fields, print, table } from "./output.js";

/* `hostkeeper certs`: the certificates Caddy serves for the routes' hosts, and custom certificates. */

/** A certificate as `GET /v1/proxy/certificates` answers it. */
type Certificate = CertificateEntry;

const certPath = (name: string) => `/v1/proxy/certificates/${encodeURIComponent(name)}`;

function certFields(c: Certificate): string {
  return fields([
    ["name", cell(c.name)],
    ["host", cell(c.host)],
    ["names", cell(c.names.join(","))],
    ["source", cell(c.source)],
    ["status", cell(c.status)],
    ["issuer", cell(c.issuer)],
    ["serial", cell(c.serial)],
    ["not before", cell(c.not_before)],
    ["not after", cell(c.not_after)],
    ["error", cell(c.error?.message)],
  ]);
}

const list: Command = {
  words: ["certs", "list"],
  positionals: { min: 0, max: 0 },
  summary: "List the certificates: one per host of the routes, then each custom certificate.",
  details: ["ERROR is Caddy's last failure to get a certificate for a host that has no valid one."],
  timeoutSeconds: 30,
  run: async (inv) => {
    const answer = await connect(inv.timeoutMs).call("GET", "/v1/proxy/certificates");
    if (inv.json) print(answer.text);
    else {
      const certs = (JSON.parse(answer.text) as { certificates: Certificate[] }).certificates;
      if (certs.length === 0) print("no certificates");
      else
        print(
          table(
            ["HOST", "NAME", "SOURCE", "STATUS", "NOT AFTER", "ERROR"],
            certs.map((c) => [
              cell(c.host),
              cell(c.name),
              cell(c.source),
              c.status,
              cell(c.not_after),
              cell(c.error?.message),
            ]),
          ),
        );
    }
    return 0;
  },
};

const show: Command = {
  words: ["certs", "show"],
  args: "<name>",
  positionals: { min: 1, max: 1 },
  summary: "Show one custom certificate, by its name.",
  timeoutSeconds: 30,
  run: async (inv) => {
    const answer = await connect(inv.timeoutMs).call("GET", certPath(inv.positionals[0] as string));
    print(inv.json ? answer.text : certFields(JSON.parse(answer.text) as Certificate));
    return 0;
  },
};

const put: Command = {
  words: ["certs", "put"],
  args: "<name> <certificate.pem> <key.pem>",
  positionals: { min: 3, max: 3 },
  summary:
    "Put a custom certificate (created, or replaced when the name exists); Caddy serves it for its names.",
  details: [
    "<certificate.pem> holds the chain, the certificate first; <key.pem> its unencrypted private key,",
    "which is sent to the agent and never printed.",
  ],
  timeoutSeconds: 90,
  run: async (inv) => {
    const [name, certFile, keyFile] = inv.positionals as [string, string, string];
    const body = { certificate_pem: readInput(certFile), key_pem: readInput(keyFile) };
    const answer = await connect(inv.timeoutMs).call("PUT", certPath(name), { body });
    print(inv.json ? answer.text : certFields(JSON.parse(answer.text) as Certificate));
    return 0;
  },
};

const rm: Command = {
  words: ["certs", "rm"],
  args: "<name>",
  positionals: { min: 1, max: 1 },
  summary: "Delete a custom certificate: its hosts go back to issued certificates.",
  details: ["With --json nothing is printed: the API answers 204 without a body."],
  timeoutSeconds: 90,
  run: async (inv) => {
    const name = inv.positionals[0] as string;
    await connect(inv.timeoutMs).call("DELETE", certPath(name));
    if (!inv.json) print(`deleted certificate ${name}`);
    return 0;
  },
};

export const certsCommands: Command[] = [list, show, put, rm];
