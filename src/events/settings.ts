import { parse, setting } from "../config.js";
import { parseCidrs } from "../util/cidrs.js";

/** Callbacks: signing, where they may go, and how their delivery is timed and retried. */
export const eventSettings = {
  webhookSecret: setting({
    key: "webhookSecret",
    env: "HOSTKEEPER_WEBHOOK_SECRET",
    area: "events",
    doc: "Signing secret for callbacks, Standard Webhooks form `whsec_<base64>` (at least 24 bytes). Generated into `<data dir>/webhook-secret` when unset.",
    defaultText: "generated",
    default: undefined as string | undefined,
    parse: (raw) => {
      const s = parse.optionalString(raw);
      if (s === undefined) return undefined;
      const m = /^whsec_([A-Za-z0-9+/]+={0,2})$/.exec(s);
      if (!m?.[1] || Buffer.from(m[1], "base64").length < 24)
        throw new Error("expected whsec_<base64 of at least 24 bytes>");
      return s;
    },
    secret: true,
  }),
  webhookDenyCidrs: setting({
    key: "webhookDenyCidrs",
    env: "HOSTKEEPER_WEBHOOK_DENY_CIDRS",
    area: "events",
    doc: "Comma-separated address ranges callbacks may never connect to (checked on the resolved address at connect time).",
    defaultText: "169.254.0.0/16,fe80::/10,0.0.0.0/8,::/128",
    default: ["169.254.0.0/16", "fe80::/10", "0.0.0.0/8", "::/128"],
    parse: (raw) => parseCidrs(parse.list(raw)),
  }),
  webhookTimeoutMs: setting({
    key: "webhookTimeoutMs",
    env: "HOSTKEEPER_WEBHOOK_TIMEOUT_MS",
    area: "events",
    doc: "Time-out of one callback delivery attempt made by the background worker.",
    defaultText: "15000",
    default: 15_000,
    parse: parse.int(100, 120_000),
  }),
  webhookFirstAttemptTimeoutMs: setting({
    key: "webhookFirstAttemptTimeoutMs",
    env: "HOSTKEEPER_WEBHOOK_FIRST_ATTEMPT_TIMEOUT_MS",
    area: "events",
    doc: "Time-out of the first delivery attempt of a change's event, started before Caddy is touched; the change goes on meanwhile and its answer waits for the attempt at most this long.",
    defaultText: "2000",
    default: 2_000,
    parse: parse.int(50, 30_000),
  }),
  webhookRetrySchedule: setting({
    key: "webhookRetrySchedule",
    env: "HOSTKEEPER_WEBHOOK_RETRY_SCHEDULE",
    area: "events",
    doc: "Comma-separated delays in seconds between delivery attempts (each with +-20% jitter); after the last, the event is dead-lettered.",
    defaultText: "5,30,120,600,1800,3600,7200,18000,36000,36000",
    default: [5, 30, 120, 600, 1800, 3600, 7200, 18000, 36000, 36000],
    parse: (raw) =>
      parse.list(raw).map((s) => {
        const n = Number(s);
        if (!(n > 0 && n <= 7 * 86400)) throw new Error(`"${s}" is not a delay in seconds`);
        return n;
      }),
  }),
};
