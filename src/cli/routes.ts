import { CliFailure, connect } from "./agent.js";
import { type Command, UsageError, usageLine } from "./args.js";
import { readJsonInput } from "./files.js";
import { cell, fields, print, table } from "./output.js";
import { routeLogCommands } from "./route-log.js";

/** A route as Caddy holds it; routes the agent did not write may have any shape. */
interface CaddyRoute {
  "@id"?: string;
  match?: { host?: string[] }[];
  handle?: {
    handler?: string;
    upstreams?: { dial?: string }[];
    load_balancing?: { selection_policy?: { policy?: string; weights?: number[] } };
  }[];
  terminal?: boolean;
}

/** A route in the words of `routes add`: upstreams as `dial[=weight]`. */
function describe(r: CaddyRoute) {
  const proxy = r.handle?.find((h) => h.handler === "reverse_proxy");
  const policy = proxy?.load_balancing?.selection_policy;
  const upstreams = (proxy?.upstreams ?? []).map((u, i) => {
    const w = policy?.policy === "weighted_round_robin" ? policy.weights?.[i] : undefined;
    return `${u.dial ?? "?"}${w === undefined ? "" : `=${w}`}`;
  });
  return {
    id: cell(r["@id"]),
    hosts: cell((r.match ?? []).flatMap((m) => m.host ?? []).join(",")),
    upstreams: cell(upstreams.join(" ")),
    policy: proxy ? cell(policy?.policy) : cell(r.handle?.map((h) => h.handler).join(",")),
    terminal: cell(r.terminal ?? false),
  };
}

function routeFields(r: CaddyRoute): string {
  const d = describe(r);
  return fields([
    ["id", d.id],
    ["hosts", d.hosts],
    ["upstreams", d.upstreams],
    ["policy", d.policy],
    ["terminal", d.terminal],
  ]);
}

const routePath = (id: string) => `/v1/proxy/routes/${encodeURIComponent(id)}`;

const list: Command = {
  words: ["routes", "list"],
  positionals: { min: 0, max: 0 },
  summary: "List the routes of the managed Caddy server, in Caddy's order.",
  details: [
    "Routes the agent did not write are listed too; POLICY is then their handlers.",
    "Upstreams are shown as `routes add` takes them: dial, and =weight for weighted_round_robin.",
  ],
  timeoutSeconds: 30,
  run: async (inv) => {
    const answer = await connect(inv.timeoutMs).call("GET", "/v1/proxy/routes");
    if (inv.json) print(answer.text);
    else {
      const routes = JSON.parse(answer.text) as CaddyRoute[];
      if (routes.length === 0) print("no routes");
      else
        print(
          table(
            ["ID", "HOSTS", "UPSTREAMS", "POLICY", "TERMINAL"],
            routes.map(describe).map((d) => [d.id, d.hosts, d.upstreams, d.policy, d.terminal]),
          ),
        );
    }
    return 0;
  },
};

const get: Command = {
  words: ["routes", "get"],
  args: "<id>",
  positionals: { min: 1, max: 1 },
  summary: "Show one route, by its @id.",
  timeoutSeconds: 30,
  run: async (inv) => {
    const id = inv.positionals[0] as string;
    const answer = await connect(inv.timeoutMs).call("GET", `/v1/proxy/routes/${encodeURIComponent(id)}`);
    print(inv.json ? answer.text : routeFields(JSON.parse(answer.text) as CaddyRoute));
    return 0;
  },
};

/** `host:port` or `host:port=weight` (weights go with `--strategy weighted_round_robin`). */
function parseUpstream(arg: string, usage: string): { dial: string; weight?: number } {
  const eq = arg.lastIndexOf("=");
  if (eq === -1) return { dial: arg };
  const weight = arg.slice(eq + 1);
  if (!/^\d{1,7}$/.test(weight))
    throw new UsageError(`upstream "${arg}": the weight after = must be a whole number`, usage);
  return { dial: arg.slice(0, eq), weight: Number(weight) };
}

const add: Command = {
  words: ["routes", "add"],
  args: "<domain> <upstream>... | --file <request.json>",
  positionals: { min: 0, max: Number.POSITIVE_INFINITY },
  summary: "Create a route sending the requests for <domain> to the upstreams.",
  details: [
    "<upstream> is host:port, or host:port=weight with --strategy weighted_round_robin.",
    "The route's @id is the normalised domain (lowercase, punycode, no trailing dot).",
    "--file sends a whole write request instead (any field of POST /v1/proxy/routes, site policies",
    "included); --callback-url is added to it, the other options and arguments are refused with it.",
  ],
  options: [
    {
      name: "strategy",
      value: "first|weighted_round_robin",
      doc: "Load-balancing selection policy (default first).",
    },
    { name: "no-terminal", doc: "Make the route non-terminal (routes are terminal by default)." },
    {
      name: "callback-url",
      value: "URL",
      doc: "Send the route_backup event to this URL before the change.",
    },
    { name: "file", value: "FILE", doc: "A JSON write request to send as it is (- for standard input)." },
  ],
  timeoutSeconds: 90,
  run: async (inv) => {
    const usage = usageLine(add);
    const body = inv.options.file === undefined ? fromArguments(inv, usage) : fromFile(inv, usage);
    if (inv.options["callback-url"] !== undefined) body.callback_url = inv.options["callback-url"];
    const answer = await connect(inv.timeoutMs).call("POST", "/v1/proxy/routes", { body });
    print(inv.json ? answer.text : routeFields(JSON.parse(answer.text) as CaddyRoute));
    return 0;
  },
};

type Invoked = Parameters<Command["run"]>[0];

/** The write request of `routes add <domain> <upstream>...` and its options. */
function fromArguments(inv: Invoked, usage: string): Record<string, unknown> {
  if (inv.positionals.length < 2) throw new UsageError("missing arguments: <domain> <upstream>...", usage);
  const [domain, ...ups] = inv.positionals as [string, ...string[]];
  const body: Record<string, unknown> = { domain, upstreams: ups.map((u) => parseUpstream(u, usage)) };
  if (inv.options.strategy !== undefined) body.strategy = inv.options.strategy;
  if (inv.options["no-terminal"]) body.terminal = false;
  return body;
}

/** The write request in the file `--file` names (a JSON object), sent as it is. */
function fromFile(inv: Invoked, usage: string): Record<string, unknown> {
  if (inv.positionals.length > 0 || inv.options.strategy !== undefined || inv.options["no-terminal"])
    throw new UsageError(
      "--file takes the whole request: no <domain>, upstreams, --strategy or --no-terminal",
      usage,
    );
  const file = inv.options.file as string;
  const value = readJsonInput(file);
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new CliFailure(`${file} must hold a JSON object: the write request`);
  return value as Record<string, unknown>;
}

const rm: Command = {
  words: ["routes", "rm"],
  args: "<id>",
  positionals: { min: 1, max: 1 },
  summary: "Delete the route with this @id.",
  details: ["With --json nothing is printed: the API answers 204 without a body."],
  options: [
    {
      name: "callback-url",
      value: "URL",
      doc: "Send the route_backup event (the deleted route) to this URL before the change.",
    },
  ],
  timeoutSeconds: 90,
  run: async (inv) => {
    const id = inv.positionals[0] as string;
    const callback = inv.options["callback-url"];
    await connect(inv.timeoutMs).call(
      "DELETE",
      routePath(id),
      callback === undefined ? {} : { body: { callback_url: callback } },
    );
    if (!inv.json) print(`deleted route ${id}`);
    return 0;
  },
};

export const routesCommands: Command[] = [list, get, add, rm, ...routeLogCommands];
