import { issuanceSettings } from "../caddy/issuance-settings.js";
import { caddySettings } from "../caddy/settings.js";
import { parse, setting } from "../config.js";
import { parseCidrs } from "../util/cidrs.js";
import { normalizeDomain } from "./route/domain.js";

/** The routes' own settings: what every route gets, how changes are gathered, what no route may do. */
const routeSettings = {
  caddyStreamCloseDelayMs: setting({
    key: "caddyStreamCloseDelayMs",
    env: "HOSTKEEPER_CADDY_STREAM_CLOSE_DELAY_MS",
    area: "proxy",
    doc: "`stream_close_delay` of every `reverse_proxy` handler in the managed server's routes (the operator's too; existing routes get it at the agent's start). A websocket or other upgraded stream is kept open this long after a config reload instead of being closed by it; then it is closed, whichever route changed (see Streams and connections). Each reload while streams are open keeps the replaced config in Caddy's memory for this long. 0: streams close at every reload.",
    defaultText: "120000",
    default: 120_000,
    parse: parse.int(0, 86_400_000),
  }),
  routeGatherMaxMs: setting({
    key: "routeGatherMaxMs",
    env: "HOSTKEEPER_ROUTE_GATHER_MAX_MS",
    area: "proxy",
    doc: "Longest time a route change that finds the writer idle waits for other changes to go to Caddy with it (one reload for a burst instead of two). It waits at most 10% of what the last write to Caddy took, and ends 10 ms (or a quarter of that bound) after the last change that joined it: nothing at a couple of hundred routes, up to about 140 ms at 20,000 for a burst, 10 ms for a change alone. 0: a change goes at once.",
    defaultText: "250",
    default: 250,
    parse: parse.int(0, 1000),
  }),
  operatorDomain: setting({
    key: "operatorDomain",
    env: "HOSTKEEPER_OPERATOR_DOMAIN",
    area: "proxy",
    doc: "The operator's own domain. Its route is managed by the agent alone; the API answers 403 to changes of it and 409 to creating it.",
    defaultText: "none",
    default: undefined as string | undefined,
    // Held as its route id, so a domain that can be no route fails with the other settings, before the start.
    parse: (raw) => {
      const s = parse.optionalString(raw);
      if (s === undefined) return undefined;
      const id = normalizeDomain(s);
      if (!id.ok) throw new Error(id.message);
      return id.domain;
    },
  }),
  upstreamDenyCidrs: setting({
    key: "upstreamDenyCidrs",
    env: "HOSTKEEPER_UPSTREAM_DENY_CIDRS",
    area: "proxy",
    doc: "Comma-separated address ranges no route's upstream may reach: a `dial` at such an address, or with a host name that resolves to one when the route is written, is refused (400). Loopback and private ranges stay allowed, since applications listen there. The agent's own API, Caddy's admin endpoint and the operator's instance ports are refused whatever this holds.",
    defaultText: "169.254.0.0/16,fe80::/10,fd00:ec2::254/128",
    default: ["169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"],
    parse: (raw) => parseCidrs(parse.list(raw)),
  }),
};

/**
 * The `proxy` group of the configuration: Caddy's (its process, admin endpoint, HTTP app and issuance) and the
 * routes' settings, as one group since the settings file and the docs' table name them so.
 */
export const proxySettings = { ...caddySettings, ...routeSettings, ...issuanceSettings };
