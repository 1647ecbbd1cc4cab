import { resolve } from "node:path";
import { parse, setting } from "../config.js";

export const certificateSettings = {
  certExpiryWarningDays: setting({
    key: "certExpiryWarningDays",
    env: "HOSTKEEPER_CERT_EXPIRY_WARNING_DAYS",
    area: "proxy",
    doc: "A certificate in `GET /v1/proxy/certificates` is `expiring` when less time is left than this many days and than a third of its life (where Caddy renews): a healthy 6-day or 12-hour certificate stays `valid`.",
    defaultText: "14",
    default: 14,
    parse: parse.int(1, 365),
  }),
  caddyJournalUnit: setting({
    key: "caddyJournalUnit",
    env: "HOSTKEEPER_CADDY_JOURNAL_UNIT",
    area: "proxy",
    doc: "With `HOSTKEEPER_CADDY_ADMIN`: the systemd unit whose journal holds that Caddy's log, when its config writes its default log to no file (to stderr, the journal). The certificates list reads Caddy's failures to get certificates from it (`journalctl -u`, what was added since the last read, at most every 30 s). The packaged unit sets `hostkeeper-caddy.service`.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw);
      if (s !== undefined && !/^[A-Za-z0-9:_.@-]+\.service$/.test(s))
        throw new Error(`expected a unit name such as caddy.service, got "${s}"`);
      return s;
    },
  }),
  caddyDataDir: setting({
    key: "caddyDataDir",
    env: "HOSTKEEPER_CADDY_DATA_DIR",
    area: "proxy",
    doc: "With `HOSTKEEPER_CADDY_ADMIN`: that Caddy's data folder (its `XDG_DATA_HOME`), whose `caddy/certificates` the certificates list reads and where custom certificates are put for it, when its config has no `file_system` storage naming another place. The packaged unit sets `/var/lib/hostkeeper-caddy/data`. The embedded Caddy's is `<data dir>/caddy/data`.",
    defaultText: "none",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw);
      return s === undefined ? undefined : resolve(s);
    },
  }),
  onDemandMaxPerRoute: setting({
    key: "onDemandMaxPerRoute",
    env: "HOSTKEEPER_ON_DEMAND_MAX_PER_ROUTE",
    area: "proxy",
    doc: "How many hosts of one wildcard route (`*.preview.example.com`) may get a certificate of their own on their first TLS handshake (on-demand issuance, docs/https.md). A host past it gets none; hosts that got one keep it. Counted per route id, kept across restarts, reset when the route is deleted.",
    defaultText: "100",
    default: 100,
    parse: parse.int(0, 100_000),
  }),
  onDemandRate: setting({
    key: "onDemandRate",
    env: "HOSTKEEPER_ON_DEMAND_RATE",
    area: "proxy",
    doc: "How many hosts of wildcard routes, all routes together, may be allowed a new certificate per minute (on-demand issuance). A host refused for it is allowed at a later handshake, once the minute has room again.",
    defaultText: "10",
    default: 10,
    parse: parse.int(0, 10_000),
  }),
};
